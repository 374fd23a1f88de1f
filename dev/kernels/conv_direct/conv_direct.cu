// conv_direct.cu — lab launchers of the conv family's direct fp32 convolution (fuseforge/families/conv/direct.cuh)
// with three fixed epilogues, for the bench and the CPU tests of dev/kernels/conv_direct/.
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

// The kernel is the package's: fuseforge/families/conv/direct.cuh (built with -I there; the bench pastes it).
#include "direct.cuh"

namespace conv_direct {
using namespace ff_conv_direct;

// ---- epilogues: float operator()(float acc, int k, int64_t at) const ---------------------------------------------
struct EpiBias {  // conv alone (+ bias when given)
    const float* bias;
    __device__ __forceinline__ float operator()(float v, int k, int64_t) const { return bias ? v + __ldg(bias + k) : v; }
};
struct EpiBiasReLU {
    const float* bias;
    __device__ __forceinline__ float operator()(float v, int k, int64_t) const {
        v = bias ? v + __ldg(bias + k) : v;
        return v > 0.0f ? v : 0.0f;
    }
};
struct EpiBiasSubSubMish {  // model 87's tail: conv + bias, - a, - b, mish (softplus threshold 20 like torch)
    const float* bias;
    float a, b;
    __device__ __forceinline__ float operator()(float v, int k, int64_t) const {
        v = bias ? v + __ldg(bias + k) : v;
        v = (v - a) - b;
        const float sp = v > 20.0f ? v : log1pf(expf(v));
        return v * tanhf(sp);
    }
};

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
