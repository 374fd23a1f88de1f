// direct.cuh — direct convolution in exact fp32 with a fused epilogue (the conv family's kernel).
//
// For convolutions with few input channels and small windows (short dot products), where cuDNN's algorithms
// are slow and, in NCHW, exact-fp32: no tensor cores, no TF32; every product is an fp32 FFMA accumulated in
// fp32. Precision: fp32-class (error vs float64 ~1e-6 of the output's RMS), NOT bitwise equal to cuDNN.
// Summation order of each output value (fixed): input channel c (outer), kernel depth offset kd, kernel
// column offset kw, kernel row offset kh (inner); the accumulator starts at 0.0f, the epilogue comes after.
//
// Layouts: input x [N, C, D, H, W] (2-D: D = 1, KD = 1), weight w [K, C, KD, KH, KW] (PyTorch's), output
// y [N, K, OD, OH, OW], all contiguous fp32. Stride, padding and dilation are run-time (per axis).
//
// Tiling (compile-time: C, KD, KH, KW, KPT, WK, WH, PH; chosen per convolution by families/conv/tiling.py):
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
//                TH_IN = (TILE_H-1)*sh + (KH-1)*dh + 1, TW_IN = (TILE_W-1)*sw + (KW-1)*dw + 1. Out-of-range
//                input (padding) is zero-filled by cp.async (src-size 0). The next tile's copy is in flight
//                while the current one is computed.
//   inner loop = per (c, kd) and kw: KH x KPT weights into registers (float4), the thread's input
//                column at the rows it needs into registers (PH + KH - 1 values when sh = dh = 1, the
//                kUnitRows path that reuses each row for KH output rows; otherwise one load per (j, kh)),
//                then KH x PH x KPT FFMAs.
//   epilogue   = a functor `float operator()(float acc, int k, int64_t at) const` applied to each output
//                value (k: its output channel, at: its flat index in y) before the one store.
//   spatial sum (kSpatialSum, `launch_spatial_sum`): instead of storing them, the epilogue's values are summed over
//                the output's spatial axes, per (n, k): a thread adds its PH rows, the warp its 32 columns
//                (shuffles, fp32), and lane 0 adds that partial into a double per (n, k) (one atomicAdd a warp,
//                tile and channel); a second small kernel scales the doubles (1 or 1/spatial size, a mean) into
//                the float32 result. The output itself is never written. Partials arrive in no fixed order, so
//                the last bits of the double sums may differ between runs (fp32-class, far below its error).
//   store with statistics (kStoreStats, `launch_store_stats`): the values are stored as by `launch`, and each unit's
//                sum and sum of squares of them are added into two doubles, for the channel-norm kernels that
//                normalise the output (families/channel_norms). A unit is an output channel (stat_groups = 0: batch
//                norm, every sample) or one sample's group of K / G consecutive channels (group norm; instance norm
//                is G = K). A thread adds its PH rows in double (each value and its square exact in double), the
//                warp its columns (shuffles; a group norm's thread first adds up its channels of one group); batch
//                norm's lane 0 adds into the block's shared doubles of its channel, flushed into the global ones
//                once, at the block's end (a block holds one channel group for all its tiles); group norm's lane 0
//                adds into the global doubles of (n, group) directly. The
//                partials arrive in no fixed order: the last bits of the sums may differ between runs.
//   channel reduction (`launch_channel_reduce`, one channel group: BK >= K): the epilogue's values of each output
//                position are reduced over the K output channels with the functor's init / combine / finish (sum,
//                mean, amin, amax): a thread combines its KPT channels (in channel order), the WK warps of a row
//                combine their partials through shared memory (in warp order, a fixed order: the same result on
//                every run), and warp wk = 0 stores one value per position into y [N, OD, OH, OW].
//
// Measured on an H100 (dev/kernels/conv_direct/, bench/results/2026-11-27_h100/conv_direct.json): 15-26
// TFLOP/s on 3- and 8-channel 3x3, 3x3x3 and 4x4x4 convolutions, 1.3-3.1x faster than cuDNN's.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ff_conv_direct {

struct Geometry {
    int n, c, d, h, w;  // input
    int k, od, oh, ow;  // output channels and extents
    int sd, sh, sw;     // stride
    int pd, ph, pw;     // padding
    int dd, dh, dw;     // dilation
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
    static constexpr int kReduceFloats = WK * WH * PH * 32;  // a channel reduction's partials, one a thread and row
    __host__ static size_t smem_bytes(const Geometry& g, bool channel_reduce = false) {
        return sizeof(float) * (static_cast<size_t>(kWeightFloats) + 2 * static_cast<size_t>(tile_floats(g)) +
                                (channel_reduce ? static_cast<size_t>(kReduceFloats) : 0));
    }
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;  // in lane 0
}

enum Output { kStore = 0, kSpatialSum = 1, kChannelReduce = 2, kStoreStats = 3 };  // what the kernel does with the
                                                                                   // epilogue's values

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;  // in lane 0
}

template <int C, int KD, int KH, int KW, int KPT, int WK, int WH, int PH, bool kUnitRows, int kOut, class Epi>
__global__ void __launch_bounds__(Config<C, KD, KH, KW, KPT, WK, WH, PH>::kThreads,
                                  Config<C, KD, KH, KW, KPT, WK, WH, PH>::kMinBlocks)
conv_direct_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                   double* __restrict__ sums, const Geometry g, const Epi epi, const int stat_groups) {
    using Cfg = Config<C, KD, KH, KW, KPT, WK, WH, PH>;
    constexpr int BK = Cfg::kBlockK;
    // kStoreStats of a batch norm: the block's sum and sum of squares per channel of its group, [BK][2]
    __shared__ double stats_s[kOut == kStoreStats ? 2 * BK : 1];
    if constexpr (kOut == kStoreStats) {
        for (int i = threadIdx.x; i < 2 * BK; i += Cfg::kThreads) stats_s[i] = 0.0;  // before the loop's first sync
    }
    extern __shared__ __align__(16) float smem[];
    float* w_s = smem;                           // [C][KD][KW][KH][BK]
    float* x_s = smem + Cfg::kWeightFloats;      // 2 x [C][KD][TH_IN][TW_IN]
    const int tw_in = Cfg::tw_in(g), th_in = Cfg::th_in(g), tile_floats = Cfg::tile_floats(g);
    float* red_s = x_s + 2 * tile_floats;        // a channel reduction's partials: [WH][PH][WK][32]
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

        // Epilogue and the one store per output value (or a reduction); lanes along OW (coalesced).
        const int tw = t % tiles_w, th = (t / tiles_w) % tiles_h, od = (t / tiles_w / tiles_h) % g.od;
        const int n = t / tiles_w / tiles_h / g.od;
        const int ow = tw * Cfg::kTileW + lane;
        const int oh0 = th * Cfg::kTileH + wh * PH;
        // flat index of (k, oh0 + j): one 64-bit base, then steps by compile-time multiples of 64-bit strides
        const int64_t row = g.ow, channel = static_cast<int64_t>(g.od) * g.oh * g.ow;
        const int k_first = k0 + wk * KPT;
        const int64_t at0 = ((static_cast<int64_t>(n) * g.k + k_first) * g.od + od) * g.oh * row + oh0 * row + ow;
        // A thread whose column and PH rows all lie in the output computes every row's epilogue unchecked, so the
        // functor's per-channel loads are one per channel, not one per row; a thread at the output's edge checks
        // each row (a full-shape operand must not be read past the output) and gives 0 for rows outside.
        const bool inside = ow < g.ow && oh0 + PH <= g.oh;
        auto values = [&](int kk, int k, float (&v)[PH]) {  // the epilogue's values of channel k at the rows
            if (inside) {
#pragma unroll
                for (int j = 0; j < PH; ++j) v[j] = epi(acc[j][kk], k, at0 + kk * channel + j * row);
            } else {
#pragma unroll
                for (int j = 0; j < PH; ++j)
                    v[j] = ow < g.ow && oh0 + j < g.oh ? epi(acc[j][kk], k, at0 + kk * channel + j * row) : 0.0f;
            }
        };
        auto store = [&](float* yk, const float (&v)[PH]) {  // the rows of one channel, from its first row's address
            if (inside) {
#pragma unroll
                for (int j = 0; j < PH; ++j) yk[j * row] = v[j];
            } else if (ow < g.ow) {
#pragma unroll
                for (int j = 0; j < PH; ++j)
                    if (oh0 + j < g.oh) yk[j * row] = v[j];
            }
        };
        if constexpr (kOut == kChannelReduce) {  // one channel group (k0 = 0): the block holds every channel
            const bool col_ok = ow < g.ow;
#pragma unroll
            for (int j = 0; j < PH; ++j) {
                float r = epi.init();
                if (col_ok && oh0 + j < g.oh) {
#pragma unroll
                    for (int kk = 0; kk < KPT; ++kk)
                        if (k_first + kk < g.k) r = epi.combine(r, epi(acc[j][kk], k_first + kk, at0 + kk * channel + j * row));
                }
                red_s[((wh * PH + j) * WK + wk) * 32 + lane] = r;
            }
            __syncthreads();
            if (wk == 0 && col_ok) {
                const int64_t plane = static_cast<int64_t>(g.oh) * g.ow;
                float* yo = y + (static_cast<int64_t>(n) * g.od + od) * plane + static_cast<int64_t>(oh0) * g.ow + ow;
#pragma unroll
                for (int j = 0; j < PH; ++j) {
                    if (oh0 + j >= g.oh) break;
                    float r = red_s[(wh * PH + j) * WK * 32 + lane];
#pragma unroll
                    for (int q = 1; q < WK; ++q) r = epi.combine(r, red_s[((wh * PH + j) * WK + q) * 32 + lane]);
                    yo[static_cast<int64_t>(j) * g.ow] = epi.finish(r);
                }
            }
        } else if constexpr (kOut == kSpatialSum) {  // every lane takes part in the shuffles; outputs outside add 0
#pragma unroll
            for (int kk = 0; kk < KPT; ++kk) {
                const int k = k_first + kk;
                if (k >= g.k) break;  // the same k for the whole warp
                float v[PH];
                values(kk, k, v);
                float s = 0.0f;
#pragma unroll
                for (int j = 0; j < PH; ++j) s += v[j];
                s = warp_sum(s);
                if (lane == 0) atomicAdd(sums + static_cast<int64_t>(n) * g.k + k, static_cast<double>(s));
            }
        } else if constexpr (kOut == kStoreStats) {  // every lane takes part in the shuffles; outputs outside add 0
            float* yk = y + at0;
            const int per_unit = stat_groups == 0 ? 1 : g.k / stat_groups;  // consecutive channels of one unit
            double s = 0.0, q = 0.0;  // the thread's sums over its rows of the channels of one unit so far
#pragma unroll
            for (int kk = 0; kk < KPT; ++kk, yk += channel) {
                const int k = k_first + kk;
                if (k >= g.k) break;  // the same k for the whole warp
                float v[PH];
                values(kk, k, v);
                store(yk, v);
#pragma unroll
                for (int j = 0; j < PH; ++j) {
                    s += static_cast<double>(v[j]);
                    q = fma(static_cast<double>(v[j]), static_cast<double>(v[j]), q);
                }
                // the unit's last channel of the thread: the warp adds its lanes' sums and lane 0 adds them in (a
                // group norm's channels of one group are added up in the thread first: fewer shuffles and atomics)
                const bool unit_ends = kk == KPT - 1 || k + 1 >= g.k || (k + 1) / per_unit != k / per_unit;
                if (!unit_ends) continue;
                s = warp_sum(s);
                q = warp_sum(q);
                if (lane == 0) {
                    if (stat_groups == 0) {
                        atomicAdd(stats_s + 2 * (k - k0), s);
                        atomicAdd(stats_s + 2 * (k - k0) + 1, q);
                    } else {
                        const int64_t unit = static_cast<int64_t>(n) * stat_groups + k / (g.k / stat_groups);
                        atomicAdd(sums + 2 * unit, s);
                        atomicAdd(sums + 2 * unit + 1, q);
                    }
                }
                s = 0.0;
                q = 0.0;
            }
        } else if (ow < g.ow) {
            float* yk = y + at0;  // the stores step a pointer (no 64-bit multiply per output)
#pragma unroll
            for (int kk = 0; kk < KPT; ++kk, yk += channel) {
                const int k = k_first + kk;
                if (k >= g.k) break;
                float v[PH];
                values(kk, k, v);
                store(yk, v);
            }
        }
        __syncthreads();  // all reads of `cur` done before it is refilled two tiles later
    }
    if constexpr (kOut == kStoreStats) {  // batch norm: the block's per-channel sums, once (the loop ended synced)
        if (stat_groups == 0) {
            for (int i = threadIdx.x; i < 2 * BK; i += Cfg::kThreads)
                if (k0 + i / 2 < g.k) atomicAdd(sums + 2 * k0 + i, stats_s[i]);
        }
    }
}

template <int C, int KD, int KH, int KW, int KPT, int WK, int WH, int PH, bool kUnitRows, int kOut, class Epi>
cudaError_t run(const float* x, const float* w, float* y, double* sums, const Geometry& g, const Epi& epi,
                cudaStream_t stream, int stat_groups = 0) {
    using Cfg = Config<C, KD, KH, KW, KPT, WK, WH, PH>;
    auto kernel = conv_direct_kernel<C, KD, KH, KW, KPT, WK, WH, PH, kUnitRows, kOut, Epi>;
    if (g.c != C) return cudaErrorInvalidValue;  // any depth: a 3-D window of depth 1 (KD = 1) is a 3-D convolution too
    if (kOut == kChannelReduce && g.k > Cfg::kBlockK) return cudaErrorInvalidValue;  // one block holds every channel
    const size_t smem = Cfg::smem_bytes(g, kOut == kChannelReduce);
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
    kernel<<<dim3(blocks, groups), Cfg::kThreads, smem, stream>>>(x, w, y, sums, g, epi, stat_groups);
    return cudaGetLastError();
}

// The convolution with its epilogue, y = epi(conv(x, w)) element by element.
template <int C, int KD, int KH, int KW, int KPT, int WK, int WH, int PH, bool kUnitRows, class Epi>
cudaError_t launch(const float* x, const float* w, float* y, const Geometry& g, const Epi& epi,
                   cudaStream_t stream) {
    return run<C, KD, KH, KW, KPT, WK, WH, PH, kUnitRows, kStore>(x, w, y, nullptr, g, epi, stream);
}

template <int kUnused = 0>  // a template: compiled only where a spatial sum instantiates it
__global__ void scale_sums(const double* __restrict__ sums, float* __restrict__ out, int64_t count, double scale) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < count) out[i] = static_cast<float>(sums[i] * scale);
}

// The spatial sum of the epilogue's values per (n, k), times `scale`: out [N * K] = scale * sum over (od, oh, ow)
// of epi(conv(x, w)); `sums` is scratch of N * K doubles (zeroed here).
template <int C, int KD, int KH, int KW, int KPT, int WK, int WH, int PH, bool kUnitRows, class Epi>
cudaError_t launch_spatial_sum(const float* x, const float* w, double* sums, float* out, const Geometry& g,
                               const Epi& epi, double scale, cudaStream_t stream) {
    const int64_t count = static_cast<int64_t>(g.n) * g.k;
    if (count == 0) return cudaSuccess;
    cudaError_t err = cudaMemsetAsync(sums, 0, sizeof(double) * static_cast<size_t>(count), stream);
    if (err != cudaSuccess) return err;
    err = run<C, KD, KH, KW, KPT, WK, WH, PH, kUnitRows, kSpatialSum>(x, w, nullptr, sums, g, epi, stream);
    if (err != cudaSuccess) return err;
    scale_sums<><<<static_cast<unsigned>((count + 255) / 256), 256, 0, stream>>>(sums, out, count, scale);
    return cudaGetLastError();
}

// The convolution with its epilogue, y = epi(conv(x, w)), and per unit the sum and sum of squares of y's values:
// sums [units][2] doubles (zeroed here); units = K (stat_groups = 0, batch norm) or N * stat_groups (group norm,
// K / stat_groups consecutive channels of one sample a unit).
template <int C, int KD, int KH, int KW, int KPT, int WK, int WH, int PH, bool kUnitRows, class Epi>
cudaError_t launch_store_stats(const float* x, const float* w, float* y, double* sums, const Geometry& g,
                               const Epi& epi, int stat_groups, cudaStream_t stream) {
    if (stat_groups < 0 || (stat_groups > 0 && g.k % stat_groups != 0)) return cudaErrorInvalidValue;
    const int64_t units = stat_groups == 0 ? g.k : static_cast<int64_t>(g.n) * stat_groups;
    cudaError_t err = cudaMemsetAsync(sums, 0, sizeof(double) * 2 * static_cast<size_t>(units), stream);
    if (err != cudaSuccess) return err;
    return run<C, KD, KH, KW, KPT, WK, WH, PH, kUnitRows, kStoreStats>(x, w, y, sums, g, epi, stream, stat_groups);
}

// The reduction over the output channels of the epilogue's values, per position: y [N, OD, OH, OW] =
// epi.finish(epi.combine over k of epi(conv(x, w))[n, k, ...]); the block must hold every channel (K <= BK).
template <int C, int KD, int KH, int KW, int KPT, int WK, int WH, int PH, bool kUnitRows, class Epi>
cudaError_t launch_channel_reduce(const float* x, const float* w, float* y, const Geometry& g, const Epi& epi,
                                  cudaStream_t stream) {
    return run<C, KD, KH, KW, KPT, WK, WH, PH, kUnitRows, kChannelReduce>(x, w, y, nullptr, g, epi, stream);
}

}  // namespace ff_conv_direct
