
// ---- Channel kernels over a channels-last input: statistics, finalise, normalise (three launches).
// See fuseforge/families/channel_norms/nhwc_runtime.py.
constexpr int kFFChanRows = kFFChanThreads / 32;  // warps per block: positions per step

// Block b of the statistics launch, counted from the end: (sample, part, 32-channel chunk).
struct FFChanNhwcBlock {
    int64_t n, chunk;
    int part;
};
__device__ __forceinline__ FFChanNhwcBlock ff_chan_nhwc_block(const FFChanDims& d, int64_t b) {
    const int64_t chunks = (d.channels + 31) / 32;
    const int64_t rest = b / chunks;
    return {rest / d.parts, b - rest * chunks, (int)(rest % d.parts)};
}

template <class Op>
__global__ void __launch_bounds__(kFFChanThreads) ff_chan_nhwc_stats(Op op, FFChanDims d, float* partial) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t blocks = (int64_t)gridDim.x;
    const FFChanNhwcBlock b = ff_chan_nhwc_block(d, blocks - 1 - (int64_t)blockIdx.x);
    const int64_t c = b.chunk * 32 + lane;
    FFChanStats st;
    st.init();
    if (c < d.channels) {
        const int64_t unit = d.groups == 0 ? c : b.n * d.groups + c / (d.channels / d.groups);
        const float pivot = ff_chan_pivot(op, d, unit);
        const float* x = op.full[0] + b.n * d.hw * d.channels + c;
        const uint32_t end = ff_chan_split((uint32_t)d.hw, b.part + 1, d.parts);
        uint32_t s = ff_chan_split((uint32_t)d.hw, b.part, d.parts) + warp;
        for (; s + 3 * kFFChanRows < end; s += 4 * kFFChanRows) {
            float v[4][1];
#pragma unroll
            for (int k = 0; k < 4; ++k) v[k][0] = __ldg(x + (int64_t)(s + k * kFFChanRows) * d.channels);
            st.add4(op.reduced(v[0], (int)c) - pivot, op.reduced(v[1], (int)c) - pivot,
                    op.reduced(v[2], (int)c) - pivot, op.reduced(v[3], (int)c) - pivot);
        }
        for (; s < end; s += kFFChanRows) {
            const float v[1] = {__ldg(x + (int64_t)s * d.channels)};
            st.add(op.reduced(v, (int)c) - pivot);
        }
    }
    __shared__ FFChanStats rows[kFFChanRows][32];
    rows[warp][lane] = st;
    __syncthreads();
    if (warp == 0 && c < d.channels) {
        FFChanStats total = rows[0][lane];
        for (int r = 1; r < kFFChanRows; ++r) total.merge(rows[r][lane]);
        total.store(partial + ((b.n * d.parts + b.part) * d.channels + c) * 3);
    }
}

// Entry e of unit u in the statistics workspace [N][parts][C][3]. Batch norm (u = channel c): e = (n, part);
// group norm (u = n * G + g): e = (part, channel k of the group).
__device__ __forceinline__ int64_t ff_chan_nhwc_entry(const FFChanDims& d, int64_t u, int64_t e) {
    if (d.groups == 0) return e * d.channels + u;  // (n * parts + part) * C + c
    const int64_t per = d.channels / d.groups;
    const int64_t n = u / d.groups, g = u - n * d.groups;
    const int64_t part = e / per, k = e - part * per;
    return (n * d.parts + part) * d.channels + g * per + k;
}

template <class Op>
__global__ void __launch_bounds__(kFFChanThreads) ff_chan_nhwc_finalize(Op op, FFChanDims d, const float* partial,
                                                                       float* norms) {
    const int lane = threadIdx.x & 31;
    const int64_t u = (int64_t)blockIdx.x * kFFChanRows + (threadIdx.x >> 5);
    if (u >= d.units) return;  // whole warps leave: the shuffles below see full warps
    const int64_t entries = d.groups == 0 ? d.batch * d.parts : d.parts * (d.channels / d.groups);
    FFChanStats st;
    st.init();
    for (int64_t e = lane; e < entries; e += 32) st.merge(FFChanStats::at(partial + ff_chan_nhwc_entry(d, u, e) * 3));
    st = ff_chan_warp_reduce(st);
    if (lane == 0) {
        const FFChanNorm norm = ff_chan_norm(op, st, ff_chan_pivot(op, d, u), d, u, true);
        norms[3 * u] = norm.mean;
        norms[3 * u + 1] = norm.lo;
        norms[3 * u + 2] = norm.invstd;
    }
}

// Unit u's finalised statistics for channel c of sample n.
__device__ __forceinline__ FFChanNorm ff_chan_nhwc_norm(const FFChanDims& d, const float* norms, int64_t n,
                                                        int64_t c) {
    const int64_t u = d.groups == 0 ? c : n * d.groups + c / (d.channels / d.groups);
    return {__ldg(norms + 3 * u), __ldg(norms + 3 * u + 1), __ldg(norms + 3 * u + 2)};
}

// One block per FFTiles tile (tiles.cuh): the input tile is read along channels into shared memory, then
// each thread computes its items along positions (a quad is four positions of one channel: one channel's
// statistics) and writes them to the NCHW outputs. `kQuads` is tiles.quads: one kernel per path, so that
// each gets the registers its own path needs (as ff_channels_last).
template <bool kQuads, class Op>
__device__ __forceinline__ void ff_chan_nhwc_apply_tile(const Op& op, const FFChanDims& d, const float* norms,
                                                        const FFTiles& tiles, float* tile, int64_t t) {
    constexpr int K = Op::kOut > 0 ? Op::kOut : 1;
    const int64_t C = d.channels, S = d.hw;
    int64_t n, c0, s0;
    tiles.origin(t, n, c0, s0);
    tiles.load_channels_last(tile, op.full[0], n, c0, s0, C, S);
    __syncthreads();
    int p, ch;
    if (kQuads) {
#pragma unroll
        for (int k = 0; k < FF_TILE_QUADS; ++k) {
            tiles.quad_along_positions(FFTiles::item(k), p, ch);
            const int64_t c = c0 + ch, s = s0 + p;
            if (c >= C || s >= S) continue;
            const FFChanNorm norm = ff_chan_nhwc_norm(d, norms, n, c);
            const float4 q = *reinterpret_cast<const float4*>(tile + tiles.slot(p, ch));
            const float in[4] = {q.x, q.y, q.z, q.w};
            float o[4][K];
#pragma unroll
            for (int j = 0; j < 4; ++j) op.element(in + j, norm, (int)c, o[j]);
#pragma unroll
            for (int m = 0; m < Op::kOut; ++m)
                *reinterpret_cast<float4*>(op.out[m] + (n * C + c) * S + s) = make_float4(o[0][m], o[1][m], o[2][m], o[3][m]);
        }
    } else {  // single elements: a warp's 32 outputs are consecutive positions of one channel
#pragma unroll 4
        for (int j = 0; j < 4 * FF_TILE_QUADS; ++j) {
            tiles.element_along_positions(FFTiles::item(j), p, ch);
            const int64_t c = c0 + ch, s = s0 + p;
            if (c >= C || s >= S) continue;
            float o[K];
            op.element(tile + tiles.slot(p, ch), ff_chan_nhwc_norm(d, norms, n, c), (int)c, o);
#pragma unroll
            for (int m = 0; m < Op::kOut; ++m) op.out[m][(n * C + c) * S + s] = o[m];
        }
    }
    __syncthreads();
}

// (8 blocks of FF_TILE_THREADS a multiprocessor, 64 registers at most: with no minimum, blocks of 128 threads
// spilled 12 bytes in the single-element path at 48 registers; for 12 or 16 blocks the normalise spilled too.)
template <bool kQuads, class Op>
__global__ void __launch_bounds__(FF_TILE_THREADS, 8) ff_chan_nhwc_apply(Op op, FFChanDims d, const float* norms,
                                                                     FFTiles tiles) {
    __shared__ __align__(16) float tile[FF_TILE_SLOTS];  // [channel][position], rows of tiles.pitch()
    tiles.quads = kQuads;  // a constant for the phases' branches
    for (int64_t t = blockIdx.x; t < tiles.count; t += gridDim.x) ff_chan_nhwc_apply_tile<kQuads>(op, d, norms, tiles, tile, t);
}

// Launch `op` over a channels-last input (d.nhwc; the binding allows it only with one full-shape input).
template <class Op>
int ff_chan_nhwc_launch(const Op& op, const FFChanDims& d, float* workspace, void* stream) {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    float* partial = workspace;
    float* norms = workspace + ff_chan_nhwc_partials(d);
    const int64_t chunks = (d.channels + 31) / 32;
    ff_chan_nhwc_stats<Op><<<(unsigned)(d.batch * d.parts * chunks), kFFChanThreads, 0, s>>>(op, d, partial);
    int code = (int)cudaGetLastError();
    if (code != 0) return code;
    const int64_t warps = (d.units + kFFChanRows - 1) / kFFChanRows;
    ff_chan_nhwc_finalize<Op><<<(unsigned)warps, kFFChanThreads, 0, s>>>(op, d, partial, norms);
    code = (int)cudaGetLastError();
    if (code != 0) return code;
    if constexpr (Op::kOut > 0) {
        bool aligned = reinterpret_cast<uintptr_t>(op.full[0]) % 16 == 0;
        for (int m = 0; m < Op::kOut; ++m) aligned = aligned && reinterpret_cast<uintptr_t>(op.out[m]) % 16 == 0;
        const FFTiles tiles(d.batch, d.channels, d.hw, aligned);
        if (tiles.quads) ff_chan_nhwc_apply<true, Op><<<tiles.blocks(), FF_TILE_THREADS, 0, s>>>(op, d, norms, tiles);
        else ff_chan_nhwc_apply<false, Op><<<tiles.blocks(), FF_TILE_THREADS, 0, s>>>(op, d, norms, tiles);
        code = (int)cudaGetLastError();
    }
    return code;
}
