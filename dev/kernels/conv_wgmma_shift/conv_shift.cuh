// conv_shift.cuh -- lab: the stride-1 direct convolution of few input channels on Hopper tensor cores, 3xTF32,
// both wgmma operands in shared memory, each tap's input operand the same tile read at a shifted start address.
// Needs igemm_ptx.cuh (wgmma_n128, the fences, smem_addr) and direct.cuh (cp_async_4, its commit) before it. sm_90a.
//
// The idea. Lay a band of the input out as pixels x channels, 16 bytes (4 channels) a pixel in each of C/4 planes,
// the pixels of a plane in the order of the padded image's rows (row pitch Wp = W + 2 pw). In that order the output
// position i = r * Wp + c needs, for tap (kh, kw), input pixel i + kh dh Wp + kw dw: the same offset for every
// position. wgmma's K-major operand without swizzle is made of 8-row x 16-byte core matrices whose rows are 16 bytes
// apart, and its descriptor's start address need only be 16-byte aligned: so the B operand (N = 128 positions x
// K = 8 channels) of tap (kh, kw) is the band's planes with the start address moved by (kh dh Wp + kw dw) x 16
// bytes. No im2col, no per-tap loads into registers: a tap is a descriptor. Positions with c >= OW (the padded
// row's last (KW - 1) dw columns) are computed and dropped: (KW - 1) dw / Wp of the work.
//
// 3xTF32: the band holds each input value as a TF32 big part (round to nearest) and a TF32 small part (the rest,
// rounded), the block's weights likewise; each tap and k8 step issues a_small.b_big, a_big.b_small and a_big.b_big.
// The weights are the A operand: M = 64 output channels (a group: blockIdx.y), [64][8] tiles of the same layout.
//
// Layouts: x [N, C, H, W], w [K, C, KH, KW], y [N, K, OH, OW], fp32, contiguous; stride 1, any padding and
// dilation. A block is one warpgroup and walks bands (n, R output rows, the whole padded width) persistently; per
// band: copy the input rows (cp.async, zero-filled padding) into the big planes, split them in place, then per chunk
// of 128 positions the 27 (x k8 steps) wgmmas, their wait, and the epilogue straight from the accumulators. One
// buffer: the other blocks on the SM keep the tensor cores busy while a block copies (2-3 blocks an SM).
// Summation order of an output (kPartials): per kernel row a fresh partial, added in fp32 to the running sum (the
// tensor cores' own accumulation rounds toward zero; the bench's error column says whether that matters); without,
// every product accumulates straight into the sum.
#include <algorithm>

namespace ff_conv_shift {

struct Geometry {
  int n, c, h, w;   // input
  int k, oh, ow;    // output channels and extents
  int ph, pw;       // padding
  int dh, dw;       // dilation
  int rows;         // output rows a band (R)
};

__device__ __forceinline__ uint32_t tf32_round(float v) { return (__float_as_uint(v) + 0x1000u) & 0xFFFFE000u; }

// K-major operand without swizzle: core matrices of 8 rows x 16 bytes, rows 16 bytes apart; `lbo` bytes from a
// core matrix to the next along K (the second 4 channels of a k8 step), `sbo` bytes to the next 8 rows.
__device__ __forceinline__ uint64_t desc_plain(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32);
}

template <int C, int KH, int KW>
struct Cfg {
  static constexpr int kQuads = (C + 7) / 8 * 2;  // 4-channel planes (the padded channels' stay zero)
  static constexpr int kSteps = kQuads / 2;       // k8 steps a tap
  static constexpr int kN = 128, kThreads = 128, kBM = 64;
  static constexpr int kATile = kBM * 8 * 4;  // one tap, k8 step and part: [2 halves of K][64 rows][4 floats]
  static constexpr int kWBytes = KH * KW * kSteps * 2 * kATile;
};

// The band's pixels: the positions its chunks cover, plus the largest tap offset, a multiple of 8.
inline int band_pixels(const Geometry& g, int kh, int kw) {
  const int wp = g.w + 2 * g.pw, positions = (g.rows * wp + 127) / 128 * 128;
  return (positions + (kh - 1) * g.dh * wp + (kw - 1) * g.dw + 7) / 8 * 8;
}

template <int C, int KH, int KW>
size_t smem_bytes(const Geometry& g) {
  using Q = Cfg<C, KH, KW>;
  return Q::kWBytes + 2 * static_cast<size_t>(Q::kQuads) * band_pixels(g, KH, KW) * 16 + 1024;
}

template <int C, int KH, int KW, class Epi, bool kPartials>
__global__ void __launch_bounds__(128)
conv_shift_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, const Geometry g,
                  const int pixels, const Epi epi) {
  using ff_conv_igemm::fence_accumulators;
  using ff_conv_igemm::wgmma_commit;
  using ff_conv_igemm::wgmma_fence;
  using ff_conv_igemm::wgmma_n128;
  using ff_conv_igemm::wgmma_wait;
  using Q = Cfg<C, KH, KW>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  unsigned char* w_s = smem;                                   // [tap][step][big, small][K half][64][4]
  float* x_s = reinterpret_cast<float*>(smem + Q::kWBytes);    // [big, small][quad][pixels][4]
  const uint32_t w_addr = ff_conv_igemm::smem_addr(w_s), x_addr = ff_conv_igemm::smem_addr(x_s);
  const uint32_t plane_bytes = static_cast<uint32_t>(pixels) * 16;
  const int tid = threadIdx.x, lane = tid & 31, q = tid >> 5, gq = lane >> 2, tq = lane & 3;
  const int k0 = blockIdx.y * Q::kBM;
  const int wp = g.w + 2 * g.pw, in_rows = g.rows + (KH - 1) * g.dh;
  const int band_positions = g.rows * wp, chunks = (band_positions + Q::kN - 1) / Q::kN;
  const int bands_per_image = (g.oh + g.rows - 1) / g.rows, bands = g.n * bands_per_image;

  // The weights of this channel group, big and small TF32 parts: value (row m, channel 8 step + kk) of a tile at
  // (kk / 4) * 1024 + m * 16 + (kk % 4) * 4 bytes.
  for (int i = tid; i < KH * KW * Q::kSteps * Q::kBM * 8; i += Q::kThreads) {
    const int kk = i % 8, m = (i / 8) % Q::kBM, step = (i / 8 / Q::kBM) % Q::kSteps, tap = i / 8 / Q::kBM / Q::kSteps;
    const int c = 8 * step + kk, k = k0 + m, r = tap / KW, s = tap % KW;
    const float v = (k < g.k && c < C) ? w[((static_cast<size_t>(k) * C + c) * KH + r) * KW + s] : 0.0f;
    const uint32_t big = tf32_round(v);
    unsigned char* tile = w_s + (tap * Q::kSteps + step) * 2 * Q::kATile;
    const int at = (kk / 4) * 1024 + m * 16 + (kk % 4) * 4;
    *reinterpret_cast<uint32_t*>(tile + at) = big;
    *reinterpret_cast<uint32_t*>(tile + Q::kATile + at) = tf32_round(v - __uint_as_float(big));
  }
  // The planes' pixels past the band's input rows (read only for dropped positions) and the padded channels' planes:
  // zero, for good (the copies below never write them).
  for (int i = tid; i < 2 * Q::kQuads * pixels * 4; i += Q::kThreads) {
    const int ch = (i / (pixels * 4)) % Q::kQuads * 4 + i % 4, p = (i / 4) % pixels;
    if (ch >= C || p >= in_rows * wp) x_s[i] = 0.0f;
  }

  for (int t = blockIdx.x; t < bands; t += gridDim.x) {
    const int n = t / bands_per_image, r0 = (t % bands_per_image) * g.rows;
    __syncthreads();  // every warp is done with the previous band's planes
    // Copy: input row r0 - ph + rr (rr < in_rows), padded column cc (cc < wp) of channel c into big plane c / 4 at
    // pixel rr * wp + cc, lane c % 4; zero outside the image.
    for (int rc = q; rc < C * in_rows; rc += 4) {
      const int c = rc / in_rows, rr = rc % in_rows, gh = r0 - g.ph + rr;
      const bool row_ok = gh >= 0 && gh < g.h;
      const float* src = x + (static_cast<size_t>(n) * C + c) * g.h * g.w + static_cast<size_t>(row_ok ? gh : 0) * g.w;
      float* dst = x_s + (c / 4) * pixels * 4 + rr * wp * 4 + c % 4;
      for (int cc = lane; cc < wp; cc += 32) {
        const int gw = cc - g.pw;
        const bool ok = row_ok && gw >= 0 && gw < g.w;
        ff_conv_direct::cp_async_4(dst + cc * 4, ok ? src + gw : x, ok);
      }
    }
    ff_conv_direct::cp_async_commit();
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    __syncthreads();
    // Split in place: big = TF32(x), small = TF32(x - big).
    for (int i = tid; i < (C + 3) / 4 * in_rows * wp; i += Q::kThreads) {  // the real channels' quads
      const int quad = i / (in_rows * wp), p = i % (in_rows * wp);
      float4* big = reinterpret_cast<float4*>(x_s + quad * pixels * 4) + p;
      float4* small = reinterpret_cast<float4*>(x_s + (Q::kQuads + quad) * pixels * 4) + p;
      const float4 v = *big;
      const float4 b = make_float4(__uint_as_float(tf32_round(v.x)), __uint_as_float(tf32_round(v.y)),
                                   __uint_as_float(tf32_round(v.z)), __uint_as_float(tf32_round(v.w)));
      *big = b;
      *small = make_float4(__uint_as_float(tf32_round(v.x - b.x)), __uint_as_float(tf32_round(v.y - b.y)),
                           __uint_as_float(tf32_round(v.z - b.z)), __uint_as_float(tf32_round(v.w - b.w)));
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // written by threads, read by wgmma
    __syncthreads();

    for (int chunk = 0; chunk < chunks; ++chunk) {
      const int p0 = chunk * Q::kN;
      float acc[64];
      float part[kPartials ? 64 : 1];
      wgmma_fence();
#pragma unroll
      for (int r = 0; r < KH; ++r) {
#pragma unroll
        for (int s = 0; s < KW; ++s)
#pragma unroll
          for (int j = 0; j < Q::kSteps; ++j) {
            const int tap = r * KW + s;
            const uint32_t a = w_addr + (tap * Q::kSteps + j) * 2 * Q::kATile;
            const uint32_t b = x_addr + 2 * j * plane_bytes + (p0 + r * g.dh * wp + s * g.dw) * 16;
            const uint64_t a_big = desc_plain(a, 1024, 128), a_small = desc_plain(a + Q::kATile, 1024, 128);
            const uint64_t b_big = desc_plain(b, plane_bytes, 128);
            const uint64_t b_small = desc_plain(b + Q::kQuads * plane_bytes, plane_bytes, 128);
            const bool first = s == 0 && j == 0 && (kPartials || r == 0);
            if constexpr (kPartials) {
              if (r == 0) {
                wgmma_n128(acc, a_small, b_big, first ? 0 : 1);
                wgmma_n128(acc, a_big, b_small);
                wgmma_n128(acc, a_big, b_big);
              } else {
                wgmma_n128(part, a_small, b_big, first ? 0 : 1);
                wgmma_n128(part, a_big, b_small);
                wgmma_n128(part, a_big, b_big);
              }
            } else {
              wgmma_n128(acc, a_small, b_big, first ? 0 : 1);
              wgmma_n128(acc, a_big, b_small);
              wgmma_n128(acc, a_big, b_big);
            }
          }
        if constexpr (kPartials) {
          if (r > 0) {
            wgmma_commit();
            wgmma_wait<0>();
            fence_accumulators(part);
            fence_accumulators(acc);
#pragma unroll
            for (int i = 0; i < 64; ++i) acc[i] += part[i];
            wgmma_fence();
          }
        }
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_accumulators(acc);
      // Epilogue: accumulator 4 jj + 2 h + e is output channel k0 + 16 q + gq + 8 h at position p0 + 8 jj + 2 tq + e.
      const int pos0 = p0 + 2 * tq;
      int rb = pos0 / wp, col = pos0 - rb * wp;
#pragma unroll
      for (int jj = 0; jj < 16; ++jj) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          int rr = rb, cc = col + e;
          if (cc >= wp) { cc -= wp; ++rr; }
          const int oh = r0 + rr;
          if (cc < g.ow && rr < g.rows && oh < g.oh) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int k = k0 + 16 * q + gq + 8 * h;
              if (k < g.k) {
                const int64_t at = ((static_cast<int64_t>(n) * g.k + k) * g.oh + oh) * g.ow + cc;
                y[at] = epi(acc[4 * jj + 2 * h + e], k, at);
              }
            }
          }
        }
        col += 8;
        if (col >= wp) { col -= wp; ++rb; }
      }
    }
  }
}

template <int C, int KH, int KW, class Epi, bool kPartials>
int blocks_per_sm(const Geometry& g) {
  int per_sm = 0;
  auto kernel = conv_shift_kernel<C, KH, KW, Epi, kPartials>;
  const size_t smem = smem_bytes<C, KH, KW>(g);
  if (smem > 227 * 1024) return 0;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024) != cudaSuccess)
    return -static_cast<int>(cudaGetLastError());
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Cfg<C, KH, KW>::kThreads, smem);
  return per_sm;
}

template <int C, int KH, int KW, class Epi, bool kPartials>
int launch(const float* x, const float* w, float* y, const Geometry& g, const Epi& epi, cudaStream_t stream) {
  using Q = Cfg<C, KH, KW>;
  if (g.c != C) return 1001;
  if (g.ow != g.w + 2 * g.pw - (KW - 1) * g.dw || g.oh != g.h + 2 * g.ph - (KH - 1) * g.dh) return 1002;  // stride 1
  const int per_sm = blocks_per_sm<C, KH, KW, Epi, kPartials>(g);
  if (per_sm <= 0) return 1003;  // the band does not fit in shared memory
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const int bands = g.n * ((g.oh + g.rows - 1) / g.rows), groups = (g.k + Q::kBM - 1) / Q::kBM;
  const int grid_x = std::max(1, std::min(bands, sms * per_sm / groups));
  conv_shift_kernel<C, KH, KW, Epi, kPartials><<<dim3(grid_x, groups), Q::kThreads, smem_bytes<C, KH, KW>(g), stream>>>(
      x, w, y, g, band_pixels(g, KH, KW), epi);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace ff_conv_shift
