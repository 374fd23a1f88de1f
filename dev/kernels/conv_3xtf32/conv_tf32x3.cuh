// conv_tf32x3.cuh — fp32-class convolution on tensor cores (3xTF32 mma.sync) with a fused epilogue (a lab kernel
// for few input channels, C <= 16, and small windows, where eager's cuDNN is exact fp32: FFMA).
//
// Precision: each product a * b runs as a_lo * b_hi + a_hi * b_lo + a_hi * b_hi on TF32 tensor cores, where
// a_hi = tf32(a), a_lo = tf32(a - a_hi) (round to nearest): the dropped a_lo * b_lo and the representation
// residue are ~2^-22 of the product, the accumulation is fp32 (the tensor core's). fp32-class, not bitwise
// equal to cuDNN or to the direct kernel.
// Summation order of each output: input-channel block (8 channels) and kernel depth outer (kd outer, block
// inner), then kernel row, kernel column; within a step the tensor core's own order over 8 channels.
//
// GEMM view: M = output pixels, N = output channels, K = taps x channels. One k-step = one tap (kd, kh, kw) and
// 8 input channels = one mma.m16n8k8 (channels past C are zero in shared memory and in the weights).
//
// Layouts: input x [N, C, D, H, W] (2-D: D = 1, KD = 1), weight w [K, C, KD, KH, KW] (PyTorch's), output
// y [N, K, OD, OH, OW], all contiguous fp32. Stride, padding and dilation are run-time (per axis).
//
// Tiling (compile-time C, KD, KH, KW, NT, WH):
//   block  = WH warps; a channel group of BN = 8 * NT output channels (blockIdx.y) for all its tiles, and a
//            persistent loop over spatial tiles t = blockIdx.x, + gridDim.x, ... (grid = resident blocks).
//   tile   = one (n, od), WH output rows x 32 output columns; warp wh owns output row wh of the tile: two
//            m16 tiles (columns 0-15, 16-31) x NT n8 tiles, 8 * NT accumulators a thread.
//   shared = the group's weights once per block, already split into (hi, lo) and stored in mma fragment order
//            ([step][nt][lane] -> float4 {hi b0, hi b1, lo b0, lo b1}: one conflict-free 16-byte load a lane);
//            and two buffers of the input tile with its halo, [KD][CP][plane], plane = TH_IN x TW_IN rows
//            padded so that plane % 32 == 8 (the A fragment's 4 channels x 8 pixels hit 32 distinct banks at
//            unit stride). cp.async zero-fills the padding and channels C..CP-1; the next tile's copy is in
//            flight while the current one is computed.
//   step   = both m16 tiles' A fragments from shared memory (8 loads), split into hi/lo in registers; per n8
//            tile one 16-byte load of B (hi and lo) and 3 mma per m16 tile.
//   epilogue = a functor `float operator()(float acc, int k, int64_t at) const` applied to each output value
//            (k: its output channel, at: its flat index in y) before its one store.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ff_conv_tf32x3 {

// The direct kernel's geometry and copy helpers (fuseforge/families/conv/direct.cuh, which the lab source includes
// first): the same geometry, the same zero-filling cp.async tile copies.
using ff_conv_direct::Geometry;
using ff_conv_direct::cp_async_4;
using ff_conv_direct::cp_async_commit;
using ff_conv_direct::cp_async_wait_one;

// tf32(x), round to nearest (ties away), as the bits the mma reads.
__device__ __forceinline__ uint32_t to_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

// x = hi + lo + O(2^-22 x), both TF32.
__device__ __forceinline__ void split(float x, uint32_t& hi, uint32_t& lo) {
    hi = to_tf32(x);
    lo = to_tf32(x - __uint_as_float(hi));
}

// d += a (16 x 8, row) * b (8 x 8, col), TF32 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int C, int KD, int KH, int KW, int NT, int WH>
struct Config {
    static constexpr int kCP = (C + 7) / 8 * 8;  // channels padded to the mma's k = 8
    static constexpr int kCB = kCP / 8;          // channel blocks
    static constexpr int kSteps = KD * kCB * KH * KW;
    static constexpr int kThreads = 32 * WH;
    static constexpr int kTileW = 32;
    static constexpr int kTileH = WH;
    static constexpr int kBlockK = 8 * NT;
    static constexpr int kWeightFloats = kSteps * NT * 32 * 4;
    __host__ __device__ static int tw_in(const Geometry& g) { return (kTileW - 1) * g.sw + (KW - 1) * g.dw + 1; }
    __host__ __device__ static int th_in(const Geometry& g) { return (kTileH - 1) * g.sh + (KH - 1) * g.dh + 1; }
    __host__ __device__ static int plane(const Geometry& g) { return (th_in(g) * tw_in(g) + 23) / 32 * 32 + 8; }
    __host__ __device__ static int tile_floats(const Geometry& g) { return KD * kCP * plane(g); }
    __host__ static size_t smem_bytes(const Geometry& g) {
        return sizeof(float) * (static_cast<size_t>(kWeightFloats) + 2 * static_cast<size_t>(tile_floats(g)));
    }
};

template <int C, int KD, int KH, int KW, int NT, int WH, class Epi>
__global__ void __launch_bounds__(Config<C, KD, KH, KW, NT, WH>::kThreads, 2)
conv_tf32x3_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                   const Geometry g, const Epi epi) {
    using Cfg = Config<C, KD, KH, KW, NT, WH>;
    constexpr int CP = Cfg::kCP, CB = Cfg::kCB, BK = Cfg::kBlockK;
    extern __shared__ __align__(16) float smem[];
    float* w_s = smem;                       // [step][nt][lane][4]
    float* x_s = smem + Cfg::kWeightFloats;  // 2 x [KD][CP][plane]
    const int tw_in = Cfg::tw_in(g), th_in = Cfg::th_in(g), plane = Cfg::plane(g);
    const int tile_floats = Cfg::tile_floats(g);
    const int lane = threadIdx.x & 31, wh = threadIdx.x >> 5;
    const int grp = lane >> 2, tig = lane & 3;  // the mma's groupID and thread-in-group
    const int k0 = blockIdx.y * BK;
    const int tiles_w = (g.ow + Cfg::kTileW - 1) / Cfg::kTileW;
    const int tiles_h = (g.oh + Cfg::kTileH - 1) / Cfg::kTileH;
    const int tiles = g.n * g.od * tiles_h * tiles_w;

    // Copy the input tile t (with halo; zero outside the input and for channels >= C) into buffer buf.
    auto load_tile = [&](int t, float* buf) {
        const int tw = t % tiles_w, th = (t / tiles_w) % tiles_h, od = (t / tiles_w / tiles_h) % g.od;
        const int n = t / tiles_w / tiles_h / g.od;
        const int gd0 = od * g.sd - g.pd, gh0 = th * Cfg::kTileH * g.sh - g.ph, gw0 = tw * Cfg::kTileW * g.sw - g.pw;
        for (int q = wh; q < KD * CP * th_in; q += WH) {  // one warp per row of the tile
            const int hh = q % th_in, c = (q / th_in) % CP, kd = q / th_in / CP;
            const int gd = gd0 + kd * g.dd, gh = gh0 + hh;
            const bool row_ok = c < C && gd >= 0 && gd < g.d && gh >= 0 && gh < g.h;
            const float* src = x + ((static_cast<size_t>(n) * C + (row_ok ? c : 0)) * g.d + (row_ok ? gd : 0)) *
                                       g.h * g.w + static_cast<size_t>(row_ok ? gh : 0) * g.w;
            float* dst = buf + (kd * CP + c) * plane + hh * tw_in;
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
    // Weights of this channel group in fragment order, split into hi and lo; zero past C and past K.
    for (int i = threadIdx.x; i < Cfg::kSteps * NT * 32; i += Cfg::kThreads) {
        const int l = i % 32, nt = (i / 32) % NT, step = i / 32 / NT;
        const int s = step % KW, r = (step / KW) % KH, cb = (step / KW / KH) % CB, kd = step / KW / KH / CB;
        const int k = k0 + nt * 8 + (l >> 2);
        const int c = cb * 8 + (l & 3);
        float b[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int ch = c + 4 * h;
            b[h] = (k < g.k && ch < C)
                       ? __ldg(w + ((((static_cast<size_t>(k) * C + ch) * KD + kd) * KH + r) * KW + s))
                       : 0.0f;
        }
        uint32_t hi0, lo0, hi1, lo1;
        split(b[0], hi0, lo0);
        split(b[1], hi1, lo1);
        reinterpret_cast<uint4*>(w_s)[i] = make_uint4(hi0, hi1, lo0, lo1);
    }

    for (int it = 0; t < tiles; ++it, t += gridDim.x) {
        float* cur = x_s + (it & 1) * tile_floats;
        if (t + static_cast<int>(gridDim.x) < tiles) load_tile(t + gridDim.x, x_s + ((it + 1) & 1) * tile_floats);
        cp_async_commit();
        cp_async_wait_one();  // tile t has landed (only the copy just issued may be pending)
        __syncthreads();

        float acc[2][NT][4];
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) acc[m][nt][i] = 0.0f;

        // The lane's A element of register i in m16 tile m: pixel m * 16 + grp + 8 * (i & 1) of the warp's row,
        // channel tig + 4 * (i >> 1) of the step's block.
        const float* xa = cur + tig * plane + (wh * g.sh) * tw_in + grp * g.sw;
        const int pix8 = 8 * g.sw, pix16 = 16 * g.sw, ch4 = 4 * plane;
        const uint4* wb = reinterpret_cast<const uint4*>(w_s) + lane;
#pragma unroll 1
        for (int kdcb = 0; kdcb < KD * CB; ++kdcb) {
            const int kd = kdcb / CB, cb = kdcb % CB;
            const float* xk = xa + (kd * CP + cb * 8) * plane;
#pragma unroll 1
            for (int r = 0; r < KH; ++r)
#pragma unroll
                for (int s = 0; s < KW; ++s) {
                    const float* xt = xk + r * g.dh * tw_in + s * g.dw;
                    const uint4* wstep = wb + ((kdcb * KH + r) * KW + s) * NT * 32;
                    uint32_t ahi[2][4], alo[2][4];  // both m16 tiles' A: each B fragment is read once a step
#pragma unroll
                    for (int m = 0; m < 2; ++m) {
                        split(xt[m * pix16], ahi[m][0], alo[m][0]);
                        split(xt[m * pix16 + pix8], ahi[m][1], alo[m][1]);
                        split(xt[m * pix16 + ch4], ahi[m][2], alo[m][2]);
                        split(xt[m * pix16 + pix8 + ch4], ahi[m][3], alo[m][3]);
                    }
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt) {
                        const uint4 b = wstep[nt * 32];
#pragma unroll
                        for (int m = 0; m < 2; ++m) {
                            mma_tf32(acc[m][nt], alo[m], b.x, b.y);
                            mma_tf32(acc[m][nt], ahi[m], b.z, b.w);
                            mma_tf32(acc[m][nt], ahi[m], b.x, b.y);
                        }
                    }
                }
        }

        // Epilogue and the one store per output value. Register i of (m, nt): pixel m * 16 + grp + 8 * (i >> 1),
        // channel nt * 8 + 2 * tig + (i & 1).
        const int tw = t % tiles_w, th = (t / tiles_w) % tiles_h, od = (t / tiles_w / tiles_h) % g.od;
        const int n = t / tiles_w / tiles_h / g.od;
        const int oh = th * Cfg::kTileH + wh;
        if (oh < g.oh) {
            // the stores step a pointer from one 64-bit base (no 64-bit multiply per output)
            const int64_t channel = static_cast<int64_t>(g.od) * g.oh * g.ow;
            const int kq = k0 + 2 * tig, ow0 = tw * Cfg::kTileW + grp;
            const int64_t at0 = ((static_cast<int64_t>(n) * g.k + kq) * g.od + od) * g.oh * g.ow +
                                static_cast<int64_t>(oh) * g.ow + ow0;
            float* yn = y + at0;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt, yn += 8 * channel)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int k = kq + nt * 8 + (i & 1);
                    if (k >= g.k) continue;
                    const int64_t at_i = at0 + (nt * 8 + (i & 1)) * channel + 8 * (i >> 1);
                    float* yi = yn + ((i & 1) ? channel : 0) + 8 * (i >> 1);
#pragma unroll
                    for (int m = 0; m < 2; ++m)
                        if (ow0 + m * 16 + 8 * (i >> 1) < g.ow) yi[m * 16] = epi(acc[m][nt][i], k, at_i + m * 16);
                }
        }
        __syncthreads();  // all reads of `cur` done before it is refilled two tiles later
    }
}

template <int C, int KD, int KH, int KW, int NT, int WH, class Epi>
cudaError_t launch(const float* x, const float* w, float* y, const Geometry& g, const Epi& epi,
                   cudaStream_t stream) {
    using Cfg = Config<C, KD, KH, KW, NT, WH>;
    auto kernel = conv_tf32x3_kernel<C, KD, KH, KW, NT, WH, Epi>;
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

}  // namespace ff_conv_tf32x3
