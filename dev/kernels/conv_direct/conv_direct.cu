// conv_direct.cu — direct convolution in exact fp32 with a fused epilogue (lab, issue #24).
//
// For convolutions with few input channels (C = 3 or 8) and small windows, where eager's cuDNN runs an
// exact-fp32 algorithm in NCHW: no tensor cores, no TF32; every product is an fp32 FFMA accumulated in fp32.
// Precision: fp32-class (same class as cuDNN's exact-fp32 algorithms, error vs float64 ~1e-6 of the
// output's RMS), NOT bitwise equal to cuDNN: cuDNN's summation order is its own.
// Summation order of each output value (fixed, documented so that a host model can mirror it):
//   input channel c (outer), then kernel depth offset kd, then kernel column offset kw, then kernel row
//   offset kh (inner); the accumulator starts at 0.0f, the epilogue (bias first) comes after the sum.
//
// Layouts: input x [N, C, D, H, W] (2-D: D = 1, KD = 1), weight w [K, C, KD, KH, KW] (PyTorch's), output
// y [N, K, OD, OH, OW], all contiguous fp32. Stride, padding and dilation are run-time (per axis).
//
// Tiling (compile-time: C, KD, KH, KW, KPT, WK, WH, PH):
//   block      = WK x WH warps (32 * WK * WH threads); it owns a channel group of BK = WK * KPT output
//                channels (blockIdx.y) for all its tiles, and loops over spatial tiles t = blockIdx.x,
//                blockIdx.x + gridDim.x, ... (grid sized to the resident blocks: persistent).
//   tile       = one (n, od) and TILE_H = WH * PH output rows x TILE_W = 32 output columns.
//   thread     = warp (wk, wh), lane l: output column ow0 + l (lanes along W: coalesced stores, and
//                conflict-free shared reads at unit stride), output rows oh0 + wh*PH + j (j < PH), output
//                channels k0 + wk*KPT + kk (kk < KPT): PH x KPT accumulators in registers.
//   shared     = all BK x C x KD x KH x KW weights of the channel group, stored [c][kd][kw][kh][BK] so a
//                thread's KPT weights are float4 loads that the whole warp shares (broadcast), loaded once
//                per block; and two buffers of the input tile with its halo, [C][KD][TH_IN][TW_IN],
//                TH_IN = (TILE_H-1)*sh + (KH-1)*dh + 1, TW_IN = (TILE_W-1)*sw + (KW-1)*dw + 1, the tile's
//                origin in the input being (od*sd - pd + kd*dd, oh0*sh - ph, ow0*sw - pw). Out-of-range
//                input (padding) is zero-filled by cp.async (src-size 0). The next tile's copy is in flight
//                while the current one is computed.
//   inner loop = per (c, kd) and kw: KH x KPT weights into registers (float4), the thread's input
//                column at the rows it needs into registers (PH + KH - 1 values when sh = dh = 1, the
//                kUnitRows path that reuses each row for KH output rows; otherwise one load per (j, kh)),
//                then KH x PH x KPT FFMAs.
//   epilogue   = a functor applied to each output value with its output channel, then the one store.

#include <cuda_runtime.h>

#include <cstddef>

namespace conv_direct {

struct Geometry {
    int n, c, d, h, w;  // input
    int k, od, oh, ow;  // output channels and extents
    int sd, sh, sw;     // stride
    int pd, ph, pw;     // padding
    int dd, dh, dw;     // dilation
};

// ---- epilogues: float operator()(float acc, int k) const ---------------------------------------------
struct EpiBias {  // conv alone (+ bias when given)
    const float* bias;
    __device__ __forceinline__ float operator()(float v, int k) const { return bias ? v + __ldg(bias + k) : v; }
};
struct EpiBiasReLU {
    const float* bias;
    __device__ __forceinline__ float operator()(float v, int k) const {
        v = bias ? v + __ldg(bias + k) : v;
        return v > 0.0f ? v : 0.0f;
    }
};
struct EpiBiasSubSubMish {  // model 87's tail: conv + bias, - a, - b, mish (softplus threshold 20 like torch)
    const float* bias;
    float a, b;
    __device__ __forceinline__ float operator()(float v, int k) const {
        v = bias ? v + __ldg(bias + k) : v;
        v = (v - a) - b;
        const float sp = v > 20.0f ? v : log1pf(expf(v));
        return v * tanhf(sp);
    }
};

__device__ __forceinline__ void cp_async_4(float* smem, const float* gmem, bool valid) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 4 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_one() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

template <int C, int KD, int KH, int KW, int KPT, int WK, int WH, int PH>
struct Config {
    static_assert(KPT % 4 == 0, "a thread's channels are read as float4");
    static constexpr int kThreads = 32 * WK * WH;
    static constexpr int kTileW = 32;
    static constexpr int kTileH = WH * PH;
    static constexpr int kBlockK = WK * KPT;
    static constexpr int kWeightFloats = C * KD * KH * KW * kBlockK;
    static constexpr int kMinBlocks = kThreads <= 256 ? 2 : 1;
    __host__ __device__ static int tw_in(const Geometry& g) { return (kTileW - 1) * g.sw + (KW - 1) * g.dw + 1; }
    __host__ __device__ static int th_in(const Geometry& g) { return (kTileH - 1) * g.sh + (KH - 1) * g.dh + 1; }
    __host__ __device__ static int tile_floats(const Geometry& g) { return C * KD * th_in(g) * tw_in(g); }
    __host__ static size_t smem_bytes(const Geometry& g) {
        return sizeof(float) * (static_cast<size_t>(kWeightFloats) + 2 * static_cast<size_t>(tile_floats(g)));
    }
};

template <int C, int KD, int KH, int KW, int KPT, int WK, int WH, int PH, bool kUnitRows, class Epi>
__global__ void __launch_bounds__(Config<C, KD, KH, KW, KPT, WK, WH, PH>::kThreads,
                                  Config<C, KD, KH, KW, KPT, WK, WH, PH>::kMinBlocks)
conv_direct_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                   const Geometry g, const Epi epi) {
    using Cfg = Config<C, KD, KH, KW, KPT, WK, WH, PH>;
    constexpr int BK = Cfg::kBlockK;
    extern __shared__ __align__(16) float smem[];
    float* w_s = smem;                           // [C][KD][KW][KH][BK]
    float* x_s = smem + Cfg::kWeightFloats;      // 2 x [C][KD][TH_IN][TW_IN]
    const int tw_in = Cfg::tw_in(g), th_in = Cfg::th_in(g), tile_floats = Cfg::tile_floats(g);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wk = warp % WK, wh = warp / WK;
    const int k0 = blockIdx.y * BK;
    const int tiles_w = (g.ow + Cfg::kTileW - 1) / Cfg::kTileW;
    const int tiles_h = (g.oh + Cfg::kTileH - 1) / Cfg::kTileH;
    const int tiles = g.n * g.od * tiles_h * tiles_w;

    // Copy the input tile t (with halo, zero-filled outside the input) into buffer buf; one warp per row.
    auto load_tile = [&](int t, float* buf) {
        const int tw = t % tiles_w, th = (t / tiles_w) % tiles_h, od = (t / tiles_w / tiles_h) % g.od;
        const int n = t / tiles_w / tiles_h / g.od;
        const int gd0 = od * g.sd - g.pd, gh0 = th * Cfg::kTileH * g.sh - g.ph, gw0 = tw * Cfg::kTileW * g.sw - g.pw;
        for (int q = warp; q < C * KD * th_in; q += WK * WH) {
            const int hh = q % th_in, kd = (q / th_in) % KD, c = q / th_in / KD;
            const int gd = gd0 + kd * g.dd, gh = gh0 + hh;
            const bool row_ok = gd >= 0 && gd < g.d && gh >= 0 && gh < g.h;
            const float* src = x + ((static_cast<size_t>(n) * C + c) * g.d + (row_ok ? gd : 0)) * g.h * g.w +
                               static_cast<size_t>(row_ok ? gh : 0) * g.w;
            float* dst = buf + q * tw_in;
            for (int ww = lane; ww < tw_in; ww += 32) {
                const int gw = gw0 + ww;
                const bool ok = row_ok && gw >= 0 && gw < g.w;
                cp_async_4(dst + ww, ok ? src + gw : x, ok);
            }
        }
    };

    int t = blockIdx.x;
    if (t < tiles) load_tile(t, x_s);
    cp_async_commit();
    // Weights of this channel group, transposed to [c][kd][kw][kh][BK]; channels past K are zero.
    for (int i = threadIdx.x; i < Cfg::kWeightFloats; i += Cfg::kThreads) {
        const int kk = i % BK, row = i / BK;
        const int r = row % KH, s = (row / KH) % KW, kd = (row / KH / KW) % KD, c = row / KH / KW / KD;
        const int k = k0 + kk;
        w_s[i] = k < g.k ? __ldg(w + ((((static_cast<size_t>(k) * C + c) * KD + kd) * KH + r) * KW + s)) : 0.0f;
    }

    for (int it = 0; t < tiles; ++it, t += gridDim.x) {
        float* cur = x_s + (it & 1) * tile_floats;
        if (t + static_cast<int>(gridDim.x) < tiles) load_tile(t + gridDim.x, x_s + ((it + 1) & 1) * tile_floats);
        cp_async_commit();
        cp_async_wait_one();  // tile t has landed (only the copy just issued may be pending)
        __syncthreads();

        float acc[PH][KPT];
#pragma unroll
        for (int j = 0; j < PH; ++j)
#pragma unroll
            for (int kk = 0; kk < KPT; ++kk) acc[j][kk] = 0.0f;

        const int row0 = wh * PH * g.sh;  // the thread's first input row in the tile (kh = 0)
        const int col0 = lane * g.sw;     // its input column (kw = 0)
#pragma unroll 1
        for (int ckd = 0; ckd < C * KD; ++ckd) {  // c outer, kd inner
            const float* xs = cur + (ckd * th_in + row0) * tw_in + col0;
            const float* ws = w_s + ckd * (KW * KH * BK) + wk * KPT;
#pragma unroll
            for (int s = 0; s < KW; ++s) {
                float wv[KH][KPT];
#pragma unroll
                for (int r = 0; r < KH; ++r)
#pragma unroll
                    for (int q = 0; q < KPT / 4; ++q) {
                        const float4 v = *reinterpret_cast<const float4*>(ws + (s * KH + r) * BK + 4 * q);
                        wv[r][4 * q] = v.x, wv[r][4 * q + 1] = v.y, wv[r][4 * q + 2] = v.z, wv[r][4 * q + 3] = v.w;
                    }
                const float* xc = xs + s * g.dw;
                if constexpr (kUnitRows) {  // sh = dh = 1: input row j + r serves output row j, tap r
                    float xv[PH + KH - 1];
#pragma unroll
                    for (int i = 0; i < PH + KH - 1; ++i) xv[i] = xc[i * tw_in];
#pragma unroll
                    for (int r = 0; r < KH; ++r)
#pragma unroll
                        for (int j = 0; j < PH; ++j)
#pragma unroll
                            for (int kk = 0; kk < KPT; ++kk) acc[j][kk] = fmaf(xv[j + r], wv[r][kk], acc[j][kk]);
                } else {
#pragma unroll
                    for (int r = 0; r < KH; ++r)
#pragma unroll
                        for (int j = 0; j < PH; ++j) {
                            const float xv = xc[(j * g.sh + r * g.dh) * tw_in];
#pragma unroll
                            for (int kk = 0; kk < KPT; ++kk) acc[j][kk] = fmaf(xv, wv[r][kk], acc[j][kk]);
                        }
                }
            }
        }

        // Epilogue and the one store per output value; lanes along OW (coalesced).
        const int tw = t % tiles_w, th = (t / tiles_w) % tiles_h, od = (t / tiles_w / tiles_h) % g.od;
        const int n = t / tiles_w / tiles_h / g.od;
        const int ow = tw * Cfg::kTileW + lane;
        const int oh0 = th * Cfg::kTileH + wh * PH;
        if (ow < g.ow) {
#pragma unroll
            for (int kk = 0; kk < KPT; ++kk) {
                const int k = k0 + wk * KPT + kk;
                if (k >= g.k) break;
                float* yk = y + ((static_cast<size_t>(n) * g.k + k) * g.od + od) * g.oh * g.ow + ow;
#pragma unroll
                for (int j = 0; j < PH; ++j)
                    if (oh0 + j < g.oh) yk[static_cast<size_t>(oh0 + j) * g.ow] = epi(acc[j][kk], k);
            }
        }
        __syncthreads();  // all reads of `cur` done before it is refilled two tiles later
    }
}

template <int C, int KD, int KH, int KW, int KPT, int WK, int WH, int PH, bool kUnitRows, class Epi>
cudaError_t launch(const float* x, const float* w, float* y, const Geometry& g, const Epi& epi,
                   cudaStream_t stream) {
    using Cfg = Config<C, KD, KH, KW, KPT, WK, WH, PH>;
    auto kernel = conv_direct_kernel<C, KD, KH, KW, KPT, WK, WH, PH, kUnitRows, Epi>;
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

}  // namespace conv_direct

// ---- C launchers: raw pointers, geometry as 18 ints (n c d h w k od oh ow sd sh sw pd ph pw dd dh dw),
// epilogue 0 = bias, 1 = bias + relu, 2 = bias, - a, - b, mish. bias may be NULL. Returns the cudaError_t.
// The kUnitRows path (sh = dh = 1) has all three epilogues; other row strides/dilations have 0 and 1.
#define CONV_DIRECT_LAUNCHER(NAME, C, KD, KH, KW, KPT, WK, WH, PH)                                               \
    extern "C" int conv_direct_##NAME(const float* x, const float* w, const float* bias, float* y,                \
                                      const int* geom, int epilogue, float a, float b, void* stream) {           \
        using namespace conv_direct;                                                                              \
        const Geometry g{geom[0],  geom[1],  geom[2],  geom[3],  geom[4],  geom[5],  geom[6],  geom[7],  geom[8], \
                         geom[9],  geom[10], geom[11], geom[12], geom[13], geom[14], geom[15], geom[16], geom[17]}; \
        cudaStream_t s = static_cast<cudaStream_t>(stream);                                                       \
        const bool unit = g.sh == 1 && g.dh == 1;                                                                 \
        if (unit && epilogue == 0) return launch<C, KD, KH, KW, KPT, WK, WH, PH, true>(x, w, y, g, EpiBias{bias}, s); \
        if (unit && epilogue == 1)                                                                                \
            return launch<C, KD, KH, KW, KPT, WK, WH, PH, true>(x, w, y, g, EpiBiasReLU{bias}, s);               \
        if (unit && epilogue == 2)                                                                                \
            return launch<C, KD, KH, KW, KPT, WK, WH, PH, true>(x, w, y, g, EpiBiasSubSubMish{bias, a, b}, s);   \
        if (epilogue == 0) return launch<C, KD, KH, KW, KPT, WK, WH, PH, false>(x, w, y, g, EpiBias{bias}, s);   \
        if (epilogue == 1)                                                                                        \
            return launch<C, KD, KH, KW, KPT, WK, WH, PH, false>(x, w, y, g, EpiBiasReLU{bias}, s);              \
        return cudaErrorNotSupported;                                                                             \
    }                                                                                                             \
    extern "C" int conv_direct_##NAME##_config(int* out) { /* C KD KH KW KPT WK WH PH */                          \
        const int v[8] = {C, KD, KH, KW, KPT, WK, WH, PH};                                                        \
        for (int i = 0; i < 8; ++i) out[i] = v[i];                                                                \
        return 0;                                                                                                 \
    }

// The instantiations the bench uses (the 10 models' convolutions):
//   2-D, C = 8, 3x3, 64 channels per block (8 warps of 8 channels, 8 rows each): models 57 65 67 73 85 87
//   3-D, C = 3, 3x3x3, 16 channels per block (2 x 4 warps, 4 rows each): models 48 83
//   3-D, C = 3, 3x3x3, 24 channels per block (3 x 2 warps, 8 rows each): model 24
//   3-D, C = 3, 4x4x4, 16 channels per block (2 x 4 warps, 4 rows each): model 27
CONV_DIRECT_LAUNCHER(c8_k3x3_bk64, 8, 1, 3, 3, 8, 8, 1, 8)
CONV_DIRECT_LAUNCHER(c3_k3x3x3_bk16, 3, 3, 3, 3, 8, 2, 4, 4)
CONV_DIRECT_LAUNCHER(c3_k3x3x3_bk24, 3, 3, 3, 3, 8, 3, 2, 8)
CONV_DIRECT_LAUNCHER(c3_k4x4x4_bk16, 3, 4, 4, 4, 8, 2, 4, 4)
