"""Fixed C++ of the channel-reduction kernels: amin/amax/sum/mean over axis 1 with prologue and epilogue, one launch.

Each channel-reduction group is a generated `Op` struct (`kernel.py`) that the
template below calls:

    kFull, kOut, kPool                // full-shape inputs ([N, C, S] contiguous), outputs ([N, S] contiguous),
                                      //   whether a pool computes the first value of the prologue
    const float* full[kFull];
    float* out[kOut];
    static float init()               // the accumulator's start value (inf, -inf, 0)
    static float combine(a, b)        // two partial results into one (NaN-propagating min/max, sum)
    float reduced(in, c, pool)        // prologue: the value reduced, from the inputs of one element of channel c
                                      //   (and its pooled value)
    void element(acc, channels, at, o)  // the reduced value from the accumulator, then the epilogue: the
                                      //   outputs of position `at` = n * S + s
    with a pool (kPool): const float* pooled;  the pool's input [N, C, *in_size] contiguous
    FFPoolWindow window(d, s)         // the window of pooled position s: start per axis, average divisor
    float pool(plane, d, w)           // the pooled value of window w over one (n, c) plane of the pool's input
A *pool kernel* (a pool with the pointwise ops after it, no reduction) has instead of init/combine/element:
    void pooled_element(in, c, pool, o)  // the outputs of one pooled element (n, c, s), [N, C, S] contiguous

Layout: the input is [N, C, S] with S the product of the spatial sizes; output position (n, s) reduces
the C values at n * C * S + c * channel_step + s * position_step: (S, 1) for contiguous inputs, (1, C) for
channels-last ones (NHWC: a convolution that ran channels-last; taken as it is when it is the kernel's one
full input, made contiguous otherwise). The pool's input likewise. A channels-last full input runs
`ff_cred_nhwc_kernel`: each warp reads 32 channels of a position at a time (coalesced) into shared memory.
Otherwise one thread per output position (four consecutive positions with 16-byte loads and stores when
S % 4 == 0 and every pointer is 16-byte aligned, one otherwise); a 256-thread block covers 256 (or 1024)
consecutive positions of one sample, so each warp's loads of one channel are contiguous (coalesced); each
thread loads 4 channels before it combines them, so 4 loads per thread are in flight. Each thread combines
its channels in order (both kernels): deterministic, no atomics.
With a pool, each thread computes its window once (start per axis, divisor) and then the pooled value of
each channel from the window of that channel's plane (scalar loads: windows are strided). A pool kernel
runs one thread per pooled element (grid-stride loop over N * C * S).
Indices are 64-bit; the binding checks the grid fits (N * blocks per sample < 2^31) and C < 2^31.
"""

CHANNEL_REDUCE_TYPES = r"""
// Channel reductions: the sizes of one call, shared by kernel and binding.
struct FFCredDims {
    int64_t batch, channels, positions;  // the input as [N, C, S]; the output as [N, S]
    int64_t tiles;                       // blocks per sample
    // with a pool: F = [N, C, *out_size] is the pooled shape, the pool's input [N, C, *in_size]
    int64_t in_positions;                // product of in_size
    int64_t in_size[3], out_size[3];     // per spatial axis (as many as the pool has)
    int64_t channel_step, position_step; // element (n, c, s) of a full input: n * C * S + c * channel_step +
                                         //   s * position_step; (S, 1) contiguous, (1, C) channels-last
    int64_t pool_nhwc;                   // 1: the pool's input is channels-last, 0: contiguous
};
constexpr int kFFCredThreads = 256;
"""

CHANNEL_REDUCE_KERNEL_RUNTIME = r"""
// ---- Channel reductions: prologue -> reduce over axis 1 -> epilogue, one thread per output position.
// See fuseforge/codegen/channel_reduce_runtime.py for the Op interface.
struct FFPoolWindow {
    int start[3];      // the window's first input index per spatial axis (negative inside the left padding)
    float divisor;     // average pools: PyTorch's divisor for this window
};
FF_HD float ff_cred_ldg(const float* p) {  // read-only load: the read-only data cache on the device
#ifdef __CUDA_ARCH__
    return __ldg(p);
#else
    return *p;
#endif
}

// Channel c's plane of the pool's input at sample n: its first value; the plane's values are 1 apart
// (contiguous) or C apart (channels-last, kNHWC).
template <bool kNHWC>
__device__ __forceinline__ const float* ff_pool_plane(const float* pooled, const FFCredDims& d, int64_t n, int64_t c) {
    return kNHWC ? pooled + n * d.channels * d.in_positions + c : pooled + (n * d.channels + c) * d.in_positions;
}

template <class Op>
struct FFCredFull {  // room for the full-shape inputs of one element (one slot when there are none)
    static constexpr int kSize = Op::kFull > 0 ? Op::kFull : 1;
};

// Inputs of channel c at element `at` (and the V - 1 positions after it) into in[0..V-1].
template <class Op, int V>
__device__ __forceinline__ void ff_cred_load(const Op& op, int64_t at, float (&in)[V][FFCredFull<Op>::kSize]) {
#pragma unroll
    for (int f = 0; f < Op::kFull; ++f) {
        if constexpr (V == 4) {
            const float4 q = __ldg(reinterpret_cast<const float4*>(op.full[f] + at));
            in[0][f] = q.x; in[1][f] = q.y; in[2][f] = q.z; in[3][f] = q.w;
        } else {
            in[0][f] = __ldg(op.full[f] + at);
        }
    }
}

// V consecutive positions per thread: 4 (16-byte loads and stores) or 1; kPoolNHWC: the pool's input is
// channels-last (its own instantiation, so the contiguous one keeps its registers).
template <class Op, int V, bool kPoolNHWC = false>
__global__ void __launch_bounds__(kFFCredThreads) ff_cred_kernel(Op op, FFCredDims d) {
    constexpr int kBatch = 4;  // channels loaded before they are combined: loads in flight per thread
    const int64_t n = blockIdx.x / d.tiles;
    const int64_t s = ((int64_t)(blockIdx.x - n * d.tiles) * kFFCredThreads + threadIdx.x) * V;
    if (s >= d.positions) return;
    const int channels = (int)d.channels;
    const int64_t plane = d.positions;
    const int64_t first = n * d.channels * plane + s * d.position_step;  // element (n, 0, s)
    const int64_t step = d.channel_step;  // from one channel to the next
    FFPoolWindow window{};
    if constexpr (Op::kPool) window = op.window(d, s);  // V == 1 with a pool
    float acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = Op::init();
    int c = 0;
    for (; c + kBatch <= channels; c += kBatch) {
        float in[kBatch][V][FFCredFull<Op>::kSize];
        float pooled[kBatch] = {};
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
            ff_cred_load<Op, V>(op, first + (int64_t)(c + k) * step, in[k]);
            if constexpr (Op::kPool)
                pooled[k] = op.template pool<kPoolNHWC>(ff_pool_plane<kPoolNHWC>(op.pooled, d, n, c + k), d, window);
        }
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
#pragma unroll
            for (int v = 0; v < V; ++v) acc[v] = Op::combine(acc[v], op.reduced(in[k][v], c + k, pooled[k]));
        }
    }
    for (; c < channels; ++c) {  // the last C % 4 channels
        float in[V][FFCredFull<Op>::kSize];
        float value = 0.0f;
        ff_cred_load<Op, V>(op, first + (int64_t)c * step, in);
        if constexpr (Op::kPool)
            value = op.template pool<kPoolNHWC>(ff_pool_plane<kPoolNHWC>(op.pooled, d, n, c), d, window);
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] = Op::combine(acc[v], op.reduced(in[v], c, value));
    }
    const int64_t out_at = n * plane + s;  // position (n, s) of the [N, S] outputs
    float o[V][Op::kOut];
#pragma unroll
    for (int v = 0; v < V; ++v) op.element(acc[v], channels, out_at + v, o[v]);
#pragma unroll
    for (int m = 0; m < Op::kOut; ++m) {
        if constexpr (V == 4) {
            *reinterpret_cast<float4*>(op.out[m] + out_at) = make_float4(o[0][m], o[1][m], o[2][m], o[3][m]);
        } else {
            op.out[m][out_at] = o[0][m];
        }
    }
}

// A channels-last input (one full input, no pool): the C values of a position are one contiguous row, and
// the block's 256 positions are 256 consecutive rows. Each warp reads 32 channels of a row at a time (128
// coalesced bytes) into shared memory; then each thread combines its position's channels in order (the
// same order as the contiguous kernel: the same result).
template <class Op>
__global__ void __launch_bounds__(kFFCredThreads) ff_cred_nhwc_kernel(Op op, FFCredDims d) {
    __shared__ float tile[kFFCredThreads][33];  // [row][channel within the chunk]; 33: no bank conflicts
    const int64_t n = blockIdx.x / d.tiles;
    const int64_t s0 = (int64_t)(blockIdx.x - n * d.tiles) * kFFCredThreads;
    const int64_t left = d.positions - s0;
    const int rows = (int)(left < kFFCredThreads ? left : kFFCredThreads);
    const int channels = (int)d.channels;
    const float* base = op.full[0] + (n * d.positions + s0) * d.channels;  // row r, channel c: base[r * C + c]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float acc = Op::init();
    for (int c0 = 0; c0 < channels; c0 += 32) {
        const int width = channels - c0 < 32 ? channels - c0 : 32;
        __syncthreads();  // the previous chunk has been read
        if (lane < width) {
            for (int r = warp; r < rows; r += kFFCredThreads / 32)
                tile[r][lane] = __ldg(base + (int64_t)r * channels + c0 + lane);
        }
        __syncthreads();
        if ((int)threadIdx.x < rows) {
            for (int j = 0; j < width; ++j) {
                const float in[1] = {tile[threadIdx.x][j]};
                acc = Op::combine(acc, op.reduced(in, c0 + j, 0.0f));
            }
        }
    }
    if ((int)threadIdx.x >= rows) return;
    const int64_t out_at = n * d.positions + s0 + threadIdx.x;
    float o[Op::kOut];
    op.element(acc, channels, out_at, o);
#pragma unroll
    for (int m = 0; m < Op::kOut; ++m) op.out[m][out_at] = o[m];
}

// A pool kernel: one thread per pooled element (n, c, s), grid-stride; the pointwise ops after the pool.
template <class Op, bool kPoolNHWC>
__global__ void __launch_bounds__(kFFCredThreads) ff_pool_kernel(Op op, FFCredDims d) {
    const int64_t total = d.batch * d.channels * d.positions;
    for (int64_t i = (int64_t)blockIdx.x * kFFCredThreads + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * kFFCredThreads) {
        const int64_t plane = i / d.positions;  // n * C + c
        const int64_t s = i - plane * d.positions;
        const int64_t n = plane / d.channels, c = plane - n * d.channels;
        const FFPoolWindow window = op.window(d, s);
        const float pooled = op.template pool<kPoolNHWC>(ff_pool_plane<kPoolNHWC>(op.pooled, d, n, c), d, window);
        float in[FFCredFull<Op>::kSize];
#pragma unroll
        for (int f = 0; f < Op::kFull; ++f) in[f] = __ldg(op.full[f] + i);
        float o[Op::kOut];
        op.pooled_element(in, (int)(plane % d.channels), pooled, o);
#pragma unroll
        for (int m = 0; m < Op::kOut; ++m) op.out[m][i] = o[m];
    }
}

template <class Op>
int ff_pool_launch(const Op& op, const FFCredDims& d, void* stream) {
    const int64_t total = d.batch * d.channels * d.positions;
    if (total == 0) return 0;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    const unsigned blocks = ff_blocks(total, kFFCredThreads);
    if (d.pool_nhwc) {
        ff_pool_kernel<Op, true><<<blocks, kFFCredThreads, 0, s>>>(op, d);
    } else {
        ff_pool_kernel<Op, false><<<blocks, kFFCredThreads, 0, s>>>(op, d);
    }
    return (int)cudaGetLastError();
}

// Launch `op` over d (checked by the binding); d.tiles is set here for the path taken.
template <class Op>
int ff_cred_launch(const Op& op, FFCredDims d, void* stream) {
    if (d.batch == 0 || d.positions == 0) return 0;
    // four positions per thread: contiguous inputs only (a pool's windows are read value by value)
    bool aligned = d.positions % 4 == 0 && !Op::kPool && d.position_step == 1;
    for (int f = 0; f < Op::kFull; ++f) aligned = aligned && reinterpret_cast<uintptr_t>(op.full[f]) % 16 == 0;
    for (int m = 0; m < Op::kOut; ++m) aligned = aligned && reinterpret_cast<uintptr_t>(op.out[m]) % 16 == 0;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if constexpr (!Op::kPool && Op::kFull == 1) {
        if (d.position_step != 1) {  // channels-last
            d.tiles = (d.positions + kFFCredThreads - 1) / kFFCredThreads;
            ff_cred_nhwc_kernel<Op><<<(unsigned)(d.batch * d.tiles), kFFCredThreads, 0, s>>>(op, d);
            return (int)cudaGetLastError();
        }
    }
    const int64_t per_block = (int64_t)kFFCredThreads * (aligned ? 4 : 1);
    d.tiles = (d.positions + per_block - 1) / per_block;
    const unsigned grid = (unsigned)(d.batch * d.tiles);
    if constexpr (Op::kPool) {
        if (d.pool_nhwc) {
            ff_cred_kernel<Op, 1, true><<<grid, kFFCredThreads, 0, s>>>(op, d);
        } else {
            ff_cred_kernel<Op, 1, false><<<grid, kFFCredThreads, 0, s>>>(op, d);
        }
    } else if (aligned) {
        ff_cred_kernel<Op, 4><<<grid, kFFCredThreads, 0, s>>>(op, d);
    } else {
        ff_cred_kernel<Op, 1><<<grid, kFFCredThreads, 0, s>>>(op, d);
    }
    return (int)cudaGetLastError();
}
"""

CHANNEL_REDUCE_BINDING_RUNTIME = r"""
// Channel reductions: every operand is made contiguous and checked against its class (full: the reduced
// tensor's shape, channel: one value per channel, scalar: one value, reduced: one per output position).
enum FFCredClass { FF_CRED_FULL = 0, FF_CRED_CHANNEL = 1, FF_CRED_SCALAR = 2, FF_CRED_REDUCED = 3, FF_CRED_POOLED = 4 };

struct FFCredCall {
    std::vector<int64_t> sizes;      // the reduced tensor's shape [N, C, *spatial]
    std::vector<int64_t> out_sizes;  // [N, 1, *spatial] (keepdim) or [N, *spatial]
    FFCredDims dims;
};

// The sizes of a call from the reduced tensor's sizes [N, C, *spatial]; `reduce` false: a pool kernel.
static FFCredCall ff_cred_of(const char* kernel, const std::vector<int64_t>& sizes, bool keepdim, bool needs_channels,
                             bool reduce = true) {
    TORCH_CHECK(sizes.size() >= 3, kernel, ": the reduced input needs a batch, a channel and a spatial axis");
    FFCredCall call;
    call.sizes = sizes;
    FFCredDims& d = call.dims;
    d.batch = call.sizes[0];
    d.channels = call.sizes[1];
    d.positions = 1;
    for (size_t k = 2; k < call.sizes.size(); ++k) d.positions *= call.sizes[k];
    d.tiles = 0;
    d.in_positions = 0;
    d.channel_step = d.positions;
    d.position_step = 1;
    d.pool_nhwc = 0;
    for (int a = 0; a < 3; ++a) d.in_size[a] = d.out_size[a] = 1;
    call.out_sizes = call.sizes;
    if (reduce && keepdim) {
        call.out_sizes[1] = 1;
    } else if (reduce) {
        call.out_sizes.erase(call.out_sizes.begin() + 1);
    }
    TORCH_CHECK(!needs_channels || d.channels > 0 || d.batch * d.positions == 0, kernel,
                ": a minimum or maximum over zero channels");
    TORCH_CHECK(d.channels < (int64_t(1) << 31), kernel, ": 2^31 channels or more");
    TORCH_CHECK(d.batch * ((d.positions + kFFCredThreads - 1) / kFFCredThreads) < (int64_t(1) << 31), kernel,
                ": too many output positions for one grid");
    return call;
}

// PyTorch's pooling output size (ceil_mode: the last window starts inside the input or its left padding).
static int64_t ff_pool_out_size(int64_t size, int64_t k, int64_t s, int64_t p, int64_t dil, bool ceil_mode) {
    const int64_t span = size + 2 * p - dil * (k - 1) - 1;
    if (span < 0) return 0;
    int64_t out = (span + (ceil_mode ? s - 1 : 0)) / s + 1;
    if (ceil_mode && (out - 1) * s >= size + p) --out;
    return out;
}

// The sizes of a call whose prologue starts with a pool of `pooled` ([N, C, *in_size]); per axis: kernel k,
// stride s, padding p, dilation dil.
static FFCredCall ff_cred_of_pool(const char* kernel, const torch::Tensor& pooled, int dims, const int64_t* k,
                                  const int64_t* s, const int64_t* p, const int64_t* dil, bool ceil_mode,
                                  bool keepdim, bool needs_channels, bool reduce) {
    TORCH_CHECK(pooled.dim() == dims + 2, kernel, ": the pool's input must be [N, C] and ", dims, " spatial sizes");
    std::vector<int64_t> sizes = pooled.sizes().vec();
    int64_t in_positions = 1, in_size[3] = {1, 1, 1}, out_size[3] = {1, 1, 1};
    for (int a = 0; a < dims; ++a) {
        in_size[a] = sizes[2 + a];
        out_size[a] = ff_pool_out_size(in_size[a], k[a], s[a], p[a], dil[a], ceil_mode);
        TORCH_CHECK(out_size[a] > 0, kernel, ": the pool's window does not fit its input");
        in_positions *= in_size[a];
        sizes[2 + a] = out_size[a];
    }
    TORCH_CHECK(in_positions < (int64_t(1) << 31), kernel, ": 2^31 or more values per plane of the pool's input");
    FFCredCall call = ff_cred_of(kernel, sizes, keepdim, needs_channels, reduce);
    call.dims.in_positions = in_positions;
    for (int a = 0; a < 3; ++a) {
        call.dims.in_size[a] = in_size[a];
        call.dims.out_size[a] = out_size[a];
    }
    return call;
}

// Channels-last: dense in NHWC (NDHWC) order and not also contiguous (with C == 1 or no spatial extent the
// two orders are the same, and contiguous is the one taken).
static bool ff_cred_channels_last(const torch::Tensor& t) {
    if (t.is_contiguous()) return false;
    return (t.dim() == 4 && t.is_contiguous(at::MemoryFormat::ChannelsLast)) ||
           (t.dim() == 5 && t.is_contiguous(at::MemoryFormat::ChannelsLast3d));
}

// The layout of the full input (channels-last when the kernel has one full input and it is so, else
// contiguous) and of the pool's input.
static void ff_cred_set_layout(FFCredCall& call, const std::vector<torch::Tensor>& full, const torch::Tensor* pooled) {
    FFCredDims& d = call.dims;
    bool nhwc = full.size() == 1;
    for (const auto& t : full) nhwc = nhwc && ff_cred_channels_last(t);
    if (nhwc) { d.channel_step = 1; d.position_step = d.channels; }
    if (pooled && ff_cred_channels_last(*pooled)) d.pool_nhwc = 1;
}

static bool ff_cred_is_nhwc(const FFCredCall& call, int cls) {
    return (cls == FF_CRED_FULL && call.dims.position_step != 1) ||
           (cls == FF_CRED_POOLED && call.dims.pool_nhwc);
}

static torch::Tensor ff_cred_operand(const char* kernel, const char* name, const torch::Tensor& t,
                                     const FFCredCall& call, const torch::Tensor& first, int cls) {
    TORCH_CHECK(t.is_cuda(), kernel, ": ", name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == torch::kFloat, kernel, ": ", name, " must be float32, got ", t.scalar_type());
    TORCH_CHECK(t.device() == first.device(), kernel, ": inputs must be on one device");
    if (cls == FF_CRED_FULL) TORCH_CHECK(t.sizes().vec() == call.sizes, kernel, ": ", name, " has sizes ",
                                         t.sizes(), ", expected ", call.sizes);
    if (cls == FF_CRED_CHANNEL) TORCH_CHECK(t.numel() == call.dims.channels, kernel, ": ", name,
                                            " needs one value per channel");
    if (cls == FF_CRED_SCALAR) TORCH_CHECK(t.numel() == 1, kernel, ": ", name, " must hold one value");
    if (cls == FF_CRED_POOLED) TORCH_CHECK(t.dim() >= 3 && t.size(0) == call.dims.batch &&
                                           t.size(1) == call.dims.channels, kernel, ": ", name, " has sizes ",
                                           t.sizes(), ", not [N, C, ...] of the pool");
    if (cls == FF_CRED_REDUCED) TORCH_CHECK(t.sizes().vec() == call.out_sizes, kernel, ": ", name, " has sizes ",
                                            t.sizes(), ", expected ", call.out_sizes);
    return ff_cred_is_nhwc(call, cls) ? t : t.contiguous();
}
"""
