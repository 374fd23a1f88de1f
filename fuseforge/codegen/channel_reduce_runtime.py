"""Fixed C++ of the channel-reduction kernels: amin/amax/sum/mean over axis 1 with prologue and epilogue, one launch.

Each channel-reduction group is a generated `Op` struct (codegen/channel_reduce_kernel.py) that the
template below calls:

    kFull, kOut                       // full-shape inputs ([N, C, S] contiguous), outputs ([N, S] contiguous)
    const float* full[kFull];
    float* out[kOut];
    static float init()               // the accumulator's start value (inf, -inf, 0)
    static float combine(a, b)        // two partial results into one (NaN-propagating min/max, sum)
    float reduced(in, c)              // prologue: the value reduced, from the inputs of one element of channel c
    void element(acc, channels, at, o)  // the reduced value from the accumulator, then the epilogue: the
                                      //   outputs of position `at` = n * S + s

Layout: the input is [N, C, S] with S the product of the spatial sizes; output position (n, s) reduces
the C values at (n * C + c) * S + s. One thread per output position (four consecutive positions with
16-byte loads and stores when S % 4 == 0 and every pointer is 16-byte aligned, one otherwise); a
256-thread block covers 256 (or 1024) consecutive positions of one sample, so each warp's loads of one
channel are contiguous (coalesced); each thread loads 4 channels before it combines them, so 4 loads per
thread are in flight. Each thread combines its channels in order: deterministic, no atomics, no shared memory.
Indices are 64-bit; the binding checks the grid fits (N * blocks per sample < 2^31) and C < 2^31.
"""

CHANNEL_REDUCE_TYPES = r"""
// Channel reductions: the sizes of one call, shared by kernel and binding.
struct FFCredDims {
    int64_t batch, channels, positions;  // the input as [N, C, S]; the output as [N, S]
    int64_t tiles;                       // blocks per sample
};
constexpr int kFFCredThreads = 256;
"""

CHANNEL_REDUCE_KERNEL_RUNTIME = r"""
// ---- Channel reductions: prologue -> reduce over axis 1 -> epilogue, one thread per output position.
// See fuseforge/codegen/channel_reduce_runtime.py for the Op interface.
FF_HD float ff_cred_ldg(const float* p) {  // read-only load: the read-only data cache on the device
#ifdef __CUDA_ARCH__
    return __ldg(p);
#else
    return *p;
#endif
}

// Inputs of channel c at element `at` (and the V - 1 positions after it) into in[0..V-1].
template <class Op, int V>
__device__ __forceinline__ void ff_cred_load(const Op& op, int64_t at, float (&in)[V][Op::kFull]) {
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

template <class Op, int V>  // V consecutive positions per thread: 4 (16-byte loads and stores) or 1
__global__ void __launch_bounds__(kFFCredThreads) ff_cred_kernel(Op op, FFCredDims d) {
    constexpr int kBatch = 4;  // channels loaded before they are combined: loads in flight per thread
    const int64_t n = blockIdx.x / d.tiles;
    const int64_t s = ((int64_t)(blockIdx.x - n * d.tiles) * kFFCredThreads + threadIdx.x) * V;
    if (s >= d.positions) return;
    const int channels = (int)d.channels;
    const int64_t plane = d.positions;
    const int64_t first = n * d.channels * plane + s;  // element (n, 0, s)
    float acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = Op::init();
    int c = 0;
    for (; c + kBatch <= channels; c += kBatch) {
        float in[kBatch][V][Op::kFull];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) ff_cred_load<Op, V>(op, first + (int64_t)(c + k) * plane, in[k]);
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
#pragma unroll
            for (int v = 0; v < V; ++v) acc[v] = Op::combine(acc[v], op.reduced(in[k][v], c + k));
        }
    }
    for (; c < channels; ++c) {  // the last C % 4 channels
        float in[V][Op::kFull];
        ff_cred_load<Op, V>(op, first + (int64_t)c * plane, in);
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] = Op::combine(acc[v], op.reduced(in[v], c));
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

// Launch `op` over d (checked by the binding); d.tiles is set here for the path taken.
template <class Op>
int ff_cred_launch(const Op& op, FFCredDims d, void* stream) {
    if (d.batch == 0 || d.positions == 0) return 0;
    bool aligned = d.positions % 4 == 0;
    for (int f = 0; f < Op::kFull; ++f) aligned = aligned && reinterpret_cast<uintptr_t>(op.full[f]) % 16 == 0;
    for (int m = 0; m < Op::kOut; ++m) aligned = aligned && reinterpret_cast<uintptr_t>(op.out[m]) % 16 == 0;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    const int64_t per_block = (int64_t)kFFCredThreads * (aligned ? 4 : 1);
    d.tiles = (d.positions + per_block - 1) / per_block;
    const unsigned grid = (unsigned)(d.batch * d.tiles);
    if (aligned) {
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
enum FFCredClass { FF_CRED_FULL = 0, FF_CRED_CHANNEL = 1, FF_CRED_SCALAR = 2, FF_CRED_REDUCED = 3 };

struct FFCredCall {
    std::vector<int64_t> sizes;      // the reduced tensor's shape [N, C, *spatial]
    std::vector<int64_t> out_sizes;  // [N, 1, *spatial] (keepdim) or [N, *spatial]
    FFCredDims dims;
};

static FFCredCall ff_cred_of(const char* kernel, const torch::Tensor& full, bool keepdim, bool needs_channels) {
    TORCH_CHECK(full.dim() >= 3, kernel, ": the reduced input needs a batch, a channel and a spatial axis");
    FFCredCall call;
    call.sizes = full.sizes().vec();
    FFCredDims& d = call.dims;
    d.batch = call.sizes[0];
    d.channels = call.sizes[1];
    d.positions = 1;
    for (size_t k = 2; k < call.sizes.size(); ++k) d.positions *= call.sizes[k];
    d.tiles = 0;
    call.out_sizes = call.sizes;
    if (keepdim) {
        call.out_sizes[1] = 1;
    } else {
        call.out_sizes.erase(call.out_sizes.begin() + 1);
    }
    TORCH_CHECK(!needs_channels || d.channels > 0 || d.batch * d.positions == 0, kernel,
                ": a minimum or maximum over zero channels");
    TORCH_CHECK(d.channels < (int64_t(1) << 31), kernel, ": 2^31 channels or more");
    TORCH_CHECK(d.batch * ((d.positions + kFFCredThreads - 1) / kFFCredThreads) < (int64_t(1) << 31), kernel,
                ": too many output positions for one grid");
    return call;
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
    if (cls == FF_CRED_REDUCED) TORCH_CHECK(t.sizes().vec() == call.out_sizes, kernel, ": ", name, " has sizes ",
                                            t.sizes(), ", expected ", call.out_sizes);
    return t.contiguous();
}
"""
