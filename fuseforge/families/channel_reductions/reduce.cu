
// ---- Channel reductions: prologue -> reduce over axis 1 -> epilogue, one thread per output position.
// See fuseforge/families/channel_reductions/runtime.py for the Op interface.
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
                pooled[k] = op.template pool<kPoolNHWC>(ff_pool_plane<kPoolNHWC>(op.pooled, d, n, c + k), d, window,
                                                        c + k);
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
            value = op.template pool<kPoolNHWC>(ff_pool_plane<kPoolNHWC>(op.pooled, d, n, c), d, window, c);
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
        const float pooled = op.template pool<kPoolNHWC>(ff_pool_plane<kPoolNHWC>(op.pooled, d, n, c), d, window,
                                                          (int)c);
        float in[FFCredFull<Op>::kSize];
#pragma unroll
        for (int f = 0; f < Op::kFull; ++f) in[f] = __ldg(op.full[f] + i);
        float o[Op::kOut];
        op.pooled_element(in, (int)(plane % d.channels), pooled, o);
#pragma unroll
        for (int m = 0; m < Op::kOut; ++m) op.out[m][i] = o[m];
    }
}

// A pool kernel over a channels-last pool input: a block takes 32 channels x 32 pooled positions of one
// sample. Lane = channel, so each window read of a warp is 32 consecutive floats of one position (coalesced);
// the outputs (NCHW) go through a shared-memory tile and leave with lane = position (coalesced stores).
struct FFPoolTile {
    static constexpr int kSize = 32;   // channels and positions of a block's tile
    static constexpr int kMaxOut = 8;  // outputs the tile stages (8 x 4.1 KB); more: one thread per element
};
template <class Op>
__global__ void __launch_bounds__(kFFCredThreads) ff_pool_nhwc_kernel(Op op, FFCredDims d) {
    __shared__ float tile[Op::kOut][FFPoolTile::kSize][FFPoolTile::kSize + 1];  // [output][channel][position]; +1: no conflicts
    const int64_t tiles_s = (d.positions + FFPoolTile::kSize - 1) / FFPoolTile::kSize;
    const int64_t tiles_c = (d.channels + FFPoolTile::kSize - 1) / FFPoolTile::kSize;
    const int64_t s0 = (int64_t)(blockIdx.x % tiles_s) * FFPoolTile::kSize;
    const int64_t c0 = (int64_t)(blockIdx.x / tiles_s % tiles_c) * FFPoolTile::kSize;
    const int64_t n = blockIdx.x / tiles_s / tiles_c;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    constexpr int kWarps = kFFCredThreads / 32;
    const int64_t c = c0 + lane;
    for (int j = warp; j < FFPoolTile::kSize; j += kWarps) {
        const int64_t s = s0 + j;
        if (s >= d.positions || c >= d.channels) continue;
        const FFPoolWindow window = op.window(d, s);
        const float pooled = op.template pool<true>(ff_pool_plane<true>(op.pooled, d, n, c), d, window, (int)c);
        const int64_t i = (n * d.channels + c) * d.positions + s;
        float in[FFCredFull<Op>::kSize];
#pragma unroll
        for (int f = 0; f < Op::kFull; ++f) in[f] = __ldg(op.full[f] + i);
        float o[Op::kOut];
        op.pooled_element(in, (int)c, pooled, o);
#pragma unroll
        for (int m = 0; m < Op::kOut; ++m) tile[m][lane][j] = o[m];
    }
    __syncthreads();
    for (int r = warp; r < FFPoolTile::kSize; r += kWarps) {
        const int64_t cc = c0 + r, s = s0 + lane;
        if (cc >= d.channels || s >= d.positions) continue;
#pragma unroll
        for (int m = 0; m < Op::kOut; ++m) op.out[m][(n * d.channels + cc) * d.positions + s] = tile[m][r][lane];
    }
}

template <class Op>
int ff_pool_launch(const Op& op, const FFCredDims& d, void* stream) {
    const int64_t total = d.batch * d.channels * d.positions;
    if (total == 0) return 0;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if constexpr (Op::kOut <= FFPoolTile::kMaxOut) {  // the tile kernel's static shared memory: kOut x 4.1 KB
        const int64_t nhwc_blocks = d.batch * ((d.channels + FFPoolTile::kSize - 1) / FFPoolTile::kSize) *
                                    ((d.positions + FFPoolTile::kSize - 1) / FFPoolTile::kSize);
        if (d.pool_nhwc && nhwc_blocks < (int64_t(1) << 31)) {
            ff_pool_nhwc_kernel<Op><<<(unsigned)nhwc_blocks, kFFCredThreads, 0, s>>>(op, d);
            return (int)cudaGetLastError();
        }
    }
    if (d.pool_nhwc) {
        ff_pool_kernel<Op, true><<<ff_blocks(total, kFFCredThreads), kFFCredThreads, 0, s>>>(op, d);
    } else {
        ff_pool_kernel<Op, false><<<ff_blocks(total, kFFCredThreads), kFFCredThreads, 0, s>>>(op, d);
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
