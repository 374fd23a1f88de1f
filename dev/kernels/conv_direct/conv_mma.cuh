// conv_mma.cuh (lab) — direct convolution on tensor cores in 3xTF32 (fp32-class), with a fused epilogue.
//
// The same convolutions as direct.cuh (few input channels, small windows: short dot products, where eager's
// NCHW cuDNN is exact fp32), the same input tiles in shared memory, the same epilogue functor; the products
// run on tensor cores instead of FFMA: mma.sync m16n8k8 TF32 with each operand split into a TF32 high part and
// a TF32 low part (x = hi + lo, both exact), acc += lo(x) hi(w) + hi(x) lo(w) + hi(x) hi(w): the dropped
// lo x lo term is below 2^-22 of the product, so the result is fp32-class (error vs float64 ~1e-6 of the
// output's RMS), like the GEMM family's 3xTF32 kernel; NOT bitwise equal to cuDNN or to direct.cuh.
//
// The convolution as a GEMM per output row: M = the tile's 32 output columns (two m-tiles of 16), N = the
// block's output channels (NT n-tiles of 8), K = C x KD x KH x KW taps (k = ((c * KD + kd) * KH + kh) * KW + kw,
// padded to a multiple of 8 with zero weights and zero inputs).
//
// Tiling (compile-time C, KD, KH, KW, NT):
//   block    = 8 warps; it owns BK = 8 * NT output channels (blockIdx.y) and loops over tiles of one (n, od),
//              8 output rows x 32 output columns (persistent grid, as direct.cuh); warp w computes row w.
//   thread   = lane (g = lane / 4, t = lane % 4): the mma fragments' rows g, g + 8 and columns 2t, 2t + 1 of
//              each (m-tile, n-tile): 2 x NT x 4 accumulators.
//   shared   = the weights of the channel group once per block, split and laid out as each lane's B fragments:
//              [k-step][n-tile][lane] float4 (hi of k = t, hi of k = t + 4, lo of both) for output channel
//              n-tile * 8 + g; the tap offsets of each k into the input tile, [k-step][t] int2 (k = t, t + 4);
//              and two buffers of the input tile with its halo [C][KD][TH_IN][TW_IN], cp.async zero-filled
//              outside the input (padding), the next tile's copy in flight while the current one is computed.
//   epilogue = `float operator()(float acc, int k, int64_t at) const` on each output value before its store.

// Needs the product's fuseforge/families/conv/direct.cuh before it (Geometry, the cp.async helpers); its launch
// repeats direct.cuh's persistent-grid sizing. Not used by the product: measured no faster than direct.cuh
// (dev/kernels/conv_direct/README.md).

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ff_conv_mma {

using ff_conv_direct::Geometry;

template <int C, int KD, int KH, int KW, int NT>
struct MmaConfig {
    static constexpr int kTaps = C * KD * KH * KW;       // K
    static constexpr int kSteps = (kTaps + 7) / 8;       // k-steps of 8
    static constexpr int kBlockK = 8 * NT;               // output channels a block
    static constexpr int kWarps = 8;
    static constexpr int kThreads = 32 * kWarps;
    static constexpr int kTileH = kWarps;                // one output row a warp
    static constexpr int kTileW = 32;                    // two m-tiles of 16 columns
    static constexpr int kWeightFloat4 = kSteps * NT * 32;
    __host__ __device__ static int tw_in(const Geometry& g) { return (kTileW - 1) * g.sw + (KW - 1) * g.dw + 1; }
    __host__ __device__ static int th_in(const Geometry& g) { return (kTileH - 1) * g.sh + (KH - 1) * g.dh + 1; }
    __host__ __device__ static int tile_floats(const Geometry& g) { return C * KD * th_in(g) * tw_in(g); }
    __host__ static size_t smem_bytes(const Geometry& g) {  // weights, tap offsets, two input tiles
        return 16 * static_cast<size_t>(kWeightFloat4) + 8 * static_cast<size_t>(kSteps) * 4 +
               sizeof(float) * 2 * static_cast<size_t>(tile_floats(g));
    }
};

__device__ __forceinline__ uint32_t tf32_of(float x) {  // round to the nearest TF32 (ties away), as a b32
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ void split(float x, uint32_t& hi, uint32_t& lo) {
    hi = tf32_of(x);
    lo = tf32_of(x - __uint_as_float(hi));  // x - hi is exact in fp32
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm(  // not volatile: independent mmas may interleave
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int C, int KD, int KH, int KW, int NT, int kMinBlocks, class Epi>
__global__ void __launch_bounds__(MmaConfig<C, KD, KH, KW, NT>::kThreads, kMinBlocks)
conv_mma_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, const Geometry g,
                const Epi epi) {
    using Cfg = MmaConfig<C, KD, KH, KW, NT>;
    constexpr int kSteps = Cfg::kSteps, BK = Cfg::kBlockK;
    extern __shared__ __align__(16) float smem[];
    float4* w_s = reinterpret_cast<float4*>(smem);                          // [kSteps][NT][32]
    int2* koff = reinterpret_cast<int2*>(w_s + Cfg::kWeightFloat4);         // [kSteps][4]
    float* x_s = reinterpret_cast<float*>(koff + kSteps * 4);               // 2 x [C][KD][TH_IN][TW_IN]
    const int tw_in = Cfg::tw_in(g), th_in = Cfg::th_in(g), tile_floats = Cfg::tile_floats(g);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int gq = lane >> 2, tq = lane & 3;
    const int k0 = blockIdx.y * BK;
    const int tiles_w = (g.ow + Cfg::kTileW - 1) / Cfg::kTileW;
    const int tiles_h = (g.oh + Cfg::kTileH - 1) / Cfg::kTileH;
    const int tiles = g.n * g.od * tiles_h * tiles_w;

    auto load_tile = [&](int t, float* buf) {  // as direct.cuh: one warp per input row, zero-filled outside
        const int tw = t % tiles_w, th = (t / tiles_w) % tiles_h, od = (t / tiles_w / tiles_h) % g.od;
        const int n = t / tiles_w / tiles_h / g.od;
        const int gd0 = od * g.sd - g.pd, gh0 = th * Cfg::kTileH * g.sh - g.ph, gw0 = tw * Cfg::kTileW * g.sw - g.pw;
        for (int q = warp; q < C * KD * th_in; q += Cfg::kWarps) {
            const int hh = q % th_in, kd = (q / th_in) % KD, c = q / th_in / KD;
            const int gd = gd0 + kd * g.dd, gh = gh0 + hh;
            const bool row_ok = gd >= 0 && gd < g.d && gh >= 0 && gh < g.h;
            const float* src = x + ((static_cast<size_t>(n) * C + c) * g.d + (row_ok ? gd : 0)) * g.h * g.w +
                               static_cast<size_t>(row_ok ? gh : 0) * g.w;
            float* dst = buf + q * tw_in;
            for (int ww = lane; ww < tw_in; ww += 32) {
                const int gw = gw0 + ww;
                const bool ok = row_ok && gw >= 0 && gw < g.w;
                ff_conv_direct::cp_async_4(dst + ww, ok ? src + gw : x, ok);
            }
        }
    };

    int t = blockIdx.x;
    if (t < tiles) load_tile(t, x_s);
    ff_conv_direct::cp_async_commit();
    // The group's weights as B fragments (hi and lo parts); taps past K and channels past the output's are zero.
    for (int i = threadIdx.x; i < Cfg::kWeightFloat4; i += Cfg::kThreads) {
        const int l = i % 32, nt = (i / 32) % NT, ks = i / 32 / NT;
        const int k = k0 + nt * 8 + (l >> 2);
        float v[2];
        for (int half = 0; half < 2; ++half) {
            const int tap = ks * 8 + (l & 3) + 4 * half;
            v[half] = (tap < Cfg::kTaps && k < g.k) ? __ldg(w + static_cast<size_t>(k) * Cfg::kTaps + tap) : 0.0f;
        }
        uint32_t h0, l0, h1, l1;
        split(v[0], h0, l0);
        split(v[1], h1, l1);
        w_s[i] = make_float4(__uint_as_float(h0), __uint_as_float(h1), __uint_as_float(l0), __uint_as_float(l1));
    }
    // Each tap's offset in the input tile (kh, kw at the tile's first output row and column); -1: a padded tap.
    for (int i = threadIdx.x; i < kSteps * 4; i += Cfg::kThreads) {
        int o[2];
        for (int half = 0; half < 2; ++half) {
            const int tap = (i / 4) * 8 + (i % 4) + 4 * half;
            const int kw = tap % KW, kh = (tap / KW) % KH, kd = (tap / KW / KH) % KD, c = tap / KW / KH / KD;
            o[half] = tap < Cfg::kTaps ? ((c * KD + kd) * th_in + kh * g.dh) * tw_in + kw * g.dw : -1;
        }
        koff[i] = make_int2(o[0], o[1]);
    }

    for (int it = 0; t < tiles; ++it, t += gridDim.x) {
        const float* cur = x_s + (it & 1) * tile_floats;
        if (t + static_cast<int>(gridDim.x) < tiles) load_tile(t + gridDim.x, x_s + ((it + 1) & 1) * tile_floats);
        ff_conv_direct::cp_async_commit();
        ff_conv_direct::cp_async_wait_one();
        __syncthreads();

        float acc[2][NT][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int q = 0; q < 4; ++q) acc[mt][nt][q] = 0.0f;

        // the warp's output row; the thread's A rows are output columns gq + 16 mt and gq + 8 + 16 mt
        const int row = warp * g.sh * tw_in + gq * g.sw;
        const int col8 = 8 * g.sw;
#pragma unroll
        for (int ks = 0; ks < kSteps; ++ks) {
            const int2 o = koff[ks * 4 + tq];
            uint32_t a_hi[2][4], a_lo[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                const int at = row + mt * 16 * g.sw;
                const int at_k[4] = {at + o.x, at + o.x + col8, at + o.y, at + o.y + col8};  // A[g][t], A[g + 8][t],
                const bool tap[4] = {o.x >= 0, o.x >= 0, o.y >= 0, o.y >= 0};              // A[g][t + 4], A[g + 8][t + 4]
#pragma unroll
                for (int r = 0; r < 4; ++r) split(tap[r] ? cur[at_k[r]] : 0.0f, a_hi[mt][r], a_lo[mt][r]);
            }
            // n-tiles in groups of up to 4 (their B fragments in registers): each pass runs over the group's
            // 2 x 4 accumulators before the next pass comes back to the first, so no mma waits on the one before;
            // small terms first
            constexpr int kGroup = NT < 4 ? NT : 4;
#pragma unroll
            for (int n0 = 0; n0 < NT; n0 += kGroup) {
                float4 b[kGroup];
#pragma unroll
                for (int j = 0; j < kGroup; ++j) b[j] = n0 + j < NT ? w_s[(ks * NT + n0 + j) * 32 + lane] : float4{};
#pragma unroll
                for (int pass = 0; pass < 3; ++pass) {
#pragma unroll
                    for (int j = 0; j < kGroup; ++j) {
                        if (n0 + j >= NT) continue;
                        const uint32_t bh0 = __float_as_uint(b[j].x), bh1 = __float_as_uint(b[j].y);
                        const uint32_t bl0 = __float_as_uint(b[j].z), bl1 = __float_as_uint(b[j].w);
#pragma unroll
                        for (int mt = 0; mt < 2; ++mt) {
                            if (pass == 0) mma_tf32(acc[mt][n0 + j], a_lo[mt], bh0, bh1);
                            if (pass == 1) mma_tf32(acc[mt][n0 + j], a_hi[mt], bl0, bl1);
                            if (pass == 2) mma_tf32(acc[mt][n0 + j], a_hi[mt], bh0, bh1);
                        }
                    }
                }
            }
        }

        // Epilogue and the one store per output value: c0 (col gq, channel 2t), c1 (gq, 2t + 1), c2 (gq + 8, 2t),
        // c3 (gq + 8, 2t + 1) of each (m-tile, n-tile).
        const int tw = t % tiles_w, th = (t / tiles_w) % tiles_h, od = (t / tiles_w / tiles_h) % g.od;
        const int n = t / tiles_w / tiles_h / g.od;
        const int oh = th * Cfg::kTileH + warp;
        if (oh < g.oh) {
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const int k = k0 + nt * 8 + 2 * tq + (q & 1);
                    if (k >= g.k) continue;
                    const int64_t at_k = ((static_cast<int64_t>(n) * g.k + k) * g.od + od) * g.oh * g.ow +
                                         static_cast<int64_t>(oh) * g.ow;
#pragma unroll
                    for (int mt = 0; mt < 2; ++mt) {
                        const int ow = tw * Cfg::kTileW + mt * 16 + gq + 8 * (q >> 1);
                        if (ow < g.ow) y[at_k + ow] = epi(acc[mt][nt][q], k, at_k + ow);
                    }
                }
            }
        }
        __syncthreads();  // all reads of `cur` done before it is refilled two tiles later
    }
}

template <int C, int KD, int KH, int KW, int NT, int kMinBlocks, class Epi>
cudaError_t launch(const float* x, const float* w, float* y, const Geometry& g, const Epi& epi, cudaStream_t stream) {
    using Cfg = MmaConfig<C, KD, KH, KW, NT>;
    auto kernel = conv_mma_kernel<C, KD, KH, KW, NT, kMinBlocks, Epi>;
    if (g.c != C || (KD == 1 && (g.d != 1 || g.od != 1))) return cudaErrorInvalidValue;
    const size_t smem = Cfg::smem_bytes(g);
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) return err;
    int device = 0, sms = 0, per_sm = 0;
    if ((err = cudaGetDevice(&device)) != cudaSuccess) return err;
    if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return err;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Cfg::kThreads, smem);
    if (err != cudaSuccess) return err;
    if (per_sm == 0) return cudaErrorInvalidConfiguration;
    const long long tiles = static_cast<long long>(g.n) * g.od * ((g.oh + Cfg::kTileH - 1) / Cfg::kTileH) *
                            ((g.ow + Cfg::kTileW - 1) / Cfg::kTileW);
    const int groups = (g.k + Cfg::kBlockK - 1) / Cfg::kBlockK;
    if (tiles == 0 || groups == 0) return cudaSuccess;
    if (tiles > (1LL << 31) - 1 || groups > 65535) return cudaErrorInvalidValue;
    const long long resident = static_cast<long long>(per_sm) * sms / groups;
    const unsigned blocks = static_cast<unsigned>(tiles < resident ? tiles : (resident > 0 ? resident : 1));
    kernel<<<dim3(blocks, groups), Cfg::kThreads, smem, stream>>>(x, w, y, g, epi);
    return cudaGetLastError();
}

}  // namespace ff_conv_mma
