// conv_shift.cuh -- lab: the stride-1 direct convolution of few input channels on Hopper tensor cores, 3xTF32,
// both wgmma operands in shared memory, each tap's input operand the same tile read at a shifted start address.
// Needs igemm_ptx.cuh (wgmma_n128, the fences, smem_addr), direct.cuh (cp_async_4) and the product's shift.cuh
// (tf32_round, desc_plain, stage_weights, copy_band, split_band, zero_padding) before it. sm_90a.
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
// dilation. A band is kChunks x 128 consecutive output positions of one image (in the padded row order: position
// i = r Wp + c, r < OH); its input is the padded image's pixels i0 .. i0 + 128 kChunks + the largest tap offset. A
// block is one warpgroup and walks bands persistently; per band: copy the input pixels (cp.async, zero-filled
// padding) into the big planes, split them in place, then per chunk of 128 positions the 27 (x k8 steps) wgmmas,
// their wait, and the epilogue straight from the accumulators (outputs at c >= OW or r >= OH dropped). kChunks is a
// template constant so that the chunk loop unrolls: ptxas must see which accumulators a wait has finished.
// Summation order of an output (kPartials): per kernel row a fresh partial, added in fp32 to the running sum (the
// tensor cores' own accumulation rounds toward zero); without, every product accumulates straight into the sum.
#include <algorithm>

namespace ff_conv_shift_lab {

using ff_conv_shift::copy_band;
using ff_conv_shift::desc_plain;
using ff_conv_shift::split_band;
using ff_conv_shift::stage_weights;
using ff_conv_shift::tf32_round;
using ff_conv_shift::zero_padding;

struct Geometry {
  int n, c, h, w;   // input
  int k, oh, ow;    // output channels and extents
  int ph, pw;       // padding
  int dh, dw;       // dilation
};

template <int C, int KH, int KW>
struct Cfg {
  static constexpr int kQuads = (C + 7) / 8 * 2;  // 4-channel planes (the padded channels' stay zero)
  static constexpr int kSteps = kQuads / 2;       // k8 steps a tap
  static constexpr int kN = 128, kBM = 64;
  static constexpr int kATile = kBM * 8 * 4;  // one tap, k8 step and part: [2 halves of K][64 rows][4 floats]
  static constexpr int kWBytes = KH * KW * kSteps * 2 * kATile;
};

// The input pixels a band reads: its positions plus the largest tap offset; a plane holds that many rounded up to 8.
inline int band_inputs(const Geometry& g, int kh, int kw, int chunks) {
  return chunks * 128 + (kh - 1) * g.dh * (g.w + 2 * g.pw) + (kw - 1) * g.dw;
}
inline int band_pixels(const Geometry& g, int kh, int kw, int chunks) {
  return (band_inputs(g, kh, kw, chunks) + 7) / 8 * 8;
}

// The kernel's variants (template flags of the lab):
//   kPartials  a fresh partial a kernel row (waited for, then added in fp32): the sum's error at the FFMA kernel's;
//   kPipe      two accumulator sets: chunk c + 1's wgmmas run while chunk c's epilogue does (no partials);
//   kAhead     two band buffers: band t + 1's copy is in flight while band t's chunks run;
//   kOut       what the epilogue does with its values:
//     kScattered  stores them from the accumulator fragment (a warp's store: 8 channels x 32 bytes);
//     kStaged     writes them, half a chunk at a time, into the warp's own shared-memory stage (its 16 channels x 64
//                 positions), then stores each channel's 64 positions with the warp's 32 lanes (256 contiguous bytes
//                 a store, the epilogue functor applied there);
//     kSum        sums them per (image, channel) into y[n K + k] (zeroed by the launcher), none stored: the
//                 spatial-sum form (a global mean after the convolution).
//   kWGs       warpgroups a block (1 or 2): they share the weights and the band, warpgroup w takes the band's chunks
//              w kChunks / kWGs .. (w + 1) kChunks / kWGs - 1 (two: twice the warps an SM to hide latency).
enum Out { kScattered = 0, kStaged = 1, kSum = 2 };
constexpr int kWarpStageFloats = 16 * 72;  // a warp's 16 channels x (64 positions + 8: its fragment writes hit 2 wavefronts)

template <int C, int KH, int KW>
size_t smem_bytes(const Geometry& g, int chunks, bool ahead, int out, int wgs) {
  using Q = Cfg<C, KH, KW>;
  return Q::kWBytes + (ahead ? 2 : 1) * 2 * static_cast<size_t>(Q::kQuads) * band_pixels(g, KH, KW, chunks) * 16 +
         (out == kStaged ? 4 * wgs * kWarpStageFloats * 4 : 0) + 1024;
}

template <int C, int KH, int KW, int kChunks, class Epi, bool kPartials, bool kPipe, bool kAhead, int kOut, int kWGs>
__global__ void __launch_bounds__(128 * kWGs)
conv_shift_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, const Geometry g,
                  const int pixels, const int inputs, const Epi epi) {
  static_assert(!(kPartials && kPipe), "the pipelined variant has no registers left for partials");
  static_assert(kChunks % kWGs == 0 && (!kPipe || kChunks / kWGs % 2 == 0), "a warpgroup's chunks (in pairs: kPipe)");
  constexpr int kThreads = 128 * kWGs, kOwn = kChunks / kWGs;  // block threads; a warpgroup's chunks
  using ff_conv_igemm::fence_accumulators;
  using ff_conv_igemm::wgmma_commit;
  using ff_conv_igemm::wgmma_fence;
  using ff_conv_igemm::wgmma_n128;
  using ff_conv_igemm::wgmma_wait;
  using Q = Cfg<C, KH, KW>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  unsigned char* w_s = smem;                                   // [tap][step][big, small][K half][64][4]
  float* x_s = reinterpret_cast<float*>(smem + Q::kWBytes);    // [buffer][big, small][quad][pixels][4]
  const uint32_t w_addr = ff_conv_igemm::smem_addr(w_s);
  const uint32_t plane_bytes = static_cast<uint32_t>(pixels) * 16;
  const int buffer_floats = 2 * Q::kQuads * pixels * 4;
  // q: the warp within its warpgroup (its fragment rows 16 q ..); wg: the warpgroup
  const int tid = threadIdx.x, lane = tid & 31, q = (tid >> 5) & 3, wg = tid >> 7, gq = lane >> 2, tq = lane & 3;
  const int k0 = blockIdx.y * Q::kBM;
  const int wp = g.w + 2 * g.pw;
  const int band_positions = kChunks * Q::kN;
  const int bands_per_image = (g.oh * wp + band_positions - 1) / band_positions, bands = g.n * bands_per_image;
  const bool pairs = g.ow % 2 == 0 && wp % 2 == 0;  // a thread's two positions e = 0, 1 share a row: float2 stores

  stage_weights<C, KH, KW, kThreads>(w_s, w, k0, g.k, tid);
  zero_padding<C, kThreads>(x_s, (kAhead ? 2 : 1) * buffer_floats, pixels, inputs, tid);
  auto copy = [&](int t, float* buf) {
    const int n = t / bands_per_image;
    copy_band<C, kThreads>(buf, x + static_cast<size_t>(n) * C * g.h * g.w, x, g.h, g.w, g.ph, g.pw,
                              (t % bands_per_image) * band_positions, pixels, inputs, tid);
  };
  // The operands of tap (r, s), k8 step j, chunk positions p0 ..: the weights' big and small tiles (A) and the
  // band's big and small planes at the tap's offset (B).
  struct Operands {
    uint64_t a_big, a_small, b_big, b_small;
  };
  auto operands = [&](uint32_t x_addr, int p0, int r, int s, int j) {
    const uint32_t a = w_addr + ((r * KW + s) * Q::kSteps + j) * 2 * Q::kATile;
    const uint32_t b = x_addr + 2 * j * plane_bytes + (p0 + r * g.dh * wp + s * g.dw) * 16;
    return Operands{desc_plain(a, 1024, 128), desc_plain(a + Q::kATile, 1024, 128), desc_plain(b, plane_bytes, 128),
                    desc_plain(b + Q::kQuads * plane_bytes, plane_bytes, 128)};
  };
  // The three products of every tap and k8 step of chunk `chunk` (positions chunk * 128 ..) into d, in one group.
  // Order: every tap's two small products first, then every tap's big product: the tensor cores' accumulation
  // rounds toward zero, and this way 18 of an output's 27 accumulations happen while its sum is still ~2^-11 of its
  // final size (as precise as a fresh partial a kernel row; tests/test_conv_wgmma_shift_lab.py models it). With
  // kPartials instead: tap by tap, kernel row 0 into d and each later row into a fresh partial, waited for and added.
  auto issue = [&](uint32_t x_addr, int chunk, float (&d)[64], float (&part)[kPartials ? 64 : 1]) {
    const int p0 = chunk * Q::kN;
    // opaque here: the descriptors are computed where they are used, not hoisted out of the chunk loop and held in
    // registers (25 taps x 4 of them spill)
    asm volatile("" : "+r"(x_addr));
    wgmma_fence();
    if constexpr (!kPartials) {
#pragma unroll
      for (int pass = 0; pass < 2; ++pass)
#pragma unroll
        for (int r = 0; r < KH; ++r)
#pragma unroll
          for (int s = 0; s < KW; ++s)
#pragma unroll
            for (int j = 0; j < Q::kSteps; ++j) {
              const Operands o = operands(x_addr, p0, r, s, j);
              if (pass == 0) {
                wgmma_n128(d, o.a_small, o.b_big, r == 0 && s == 0 && j == 0 ? 0 : 1);
                wgmma_n128(d, o.a_big, o.b_small);
              } else {
                wgmma_n128(d, o.a_big, o.b_big);
              }
            }
    } else {
#pragma unroll
      for (int r = 0; r < KH; ++r) {
        float (&sum)[64] = r == 0 ? d : part;
#pragma unroll
        for (int s = 0; s < KW; ++s)
#pragma unroll
          for (int j = 0; j < Q::kSteps; ++j) {
            const Operands o = operands(x_addr, p0, r, s, j);
            wgmma_n128(sum, o.a_small, o.b_big, s == 0 && j == 0 ? 0 : 1);
            wgmma_n128(sum, o.a_big, o.b_small);
            wgmma_n128(sum, o.a_big, o.b_big);
          }
        if (r > 0) {
          wgmma_commit();
          wgmma_wait<0>();
          fence_accumulators(part);
          fence_accumulators(d);
#pragma unroll
          for (int i = 0; i < 64; ++i) d[i] += part[i];
          wgmma_fence();
        }
      }
    }
    wgmma_commit();
  };
  // Epilogue of chunk `chunk` of band t from its accumulators: accumulator 4 jj + 2 h + e is output channel
  // k0 + 16 q + gq + 8 h at position i0 + chunk * 128 + 8 jj + 2 tq + e (row pos / wp, column pos % wp).
  float sums[2] = {0.0f, 0.0f};
  float* stage = reinterpret_cast<float*>(smem + Q::kWBytes) + (kAhead ? 2 : 1) * buffer_floats +
                 (tid >> 5) * kWarpStageFloats;
  auto staged = [&](int t, int chunk, const float (&d)[64]) {
    const int n = t / bands_per_image, first = (t % bands_per_image) * band_positions + chunk * Q::kN;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int jj = 0; jj < 8; ++jj)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          *reinterpret_cast<float2*>(stage + (gq + 8 * h) * 72 + 8 * jj + 2 * tq) =
              make_float2(d[4 * (8 * half + jj) + 2 * h], d[4 * (8 * half + jj) + 2 * h + 1]);
      __syncwarp();
      // lane l: positions pos, pos + 1 of the half, the same for the warp's 16 channels
      const int pos = first + 64 * half + 2 * lane;
      const int oh = pos / wp, col = pos - oh * wp;
      const bool both = pairs && oh < g.oh && col < g.ow;  // pairs: col even, col + 1 < OW, 8-byte aligned
      const int64_t plane = static_cast<int64_t>(g.oh) * g.ow;
#pragma unroll 4
      for (int row = 0; row < 16; ++row) {
        const int k = k0 + 16 * q + row;
        if (k >= g.k) break;
        const float2 v = *reinterpret_cast<const float2*>(stage + row * 72 + 2 * lane);
        const int64_t base = (static_cast<int64_t>(n) * g.k + k) * plane;
        if (both) {
          const int64_t at = base + static_cast<int64_t>(oh) * g.ow + col;
          *reinterpret_cast<float2*>(y + at) = make_float2(epi(v.x, k, at), epi(v.y, k, at + 1));
        } else {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            int rr = oh, cc = col + e;
            if (cc >= wp) { cc -= wp; ++rr; }
            if (cc < g.ow && rr < g.oh) {
              const int64_t at = base + static_cast<int64_t>(rr) * g.ow + cc;
              y[at] = epi(e == 0 ? v.x : v.y, k, at);
            }
          }
        }
      }
      __syncwarp();  // the stage is the warp's again before the next half overwrites it
    }
  };
  auto scattered = [&](int t, int chunk, const float (&d)[64]) {
    const int n = t / bands_per_image, pos0 = (t % bands_per_image) * band_positions + chunk * Q::kN + 2 * tq;
    int oh = pos0 / wp, col = pos0 - oh * wp;
#pragma unroll
    for (int jj = 0; jj < 16; ++jj) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int k = k0 + 16 * q + gq + 8 * h;
        if (k >= g.k) continue;
        const int64_t at = ((static_cast<int64_t>(n) * g.k + k) * g.oh + oh) * g.ow + col;
        if (pairs) {  // col even and col + 1 < wp: both positions in row oh
          if (oh < g.oh && col < g.ow) {
            const float v0 = epi(d[4 * jj + 2 * h], k, at), v1 = epi(d[4 * jj + 2 * h + 1], k, at + 1);
            if constexpr (kOut == kSum) sums[h] += v0 + v1;
            else *reinterpret_cast<float2*>(y + at) = make_float2(v0, v1);
          }
        } else {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            int rr = oh, cc = col + e;
            if (cc >= wp) { cc -= wp; ++rr; }
            if (cc < g.ow && rr < g.oh) {
              const int64_t at_e = ((static_cast<int64_t>(n) * g.k + k) * g.oh + rr) * g.ow + cc;
              const float v = epi(d[4 * jj + 2 * h + e], k, at_e);
              if constexpr (kOut == kSum) sums[h] += v;
              else y[at_e] = v;
            }
          }
        }
      }
      col += 8;
      if (col >= wp) { col -= wp; ++oh; }
    }
  };
  auto epilogue = [&](int t, int chunk, const float (&d)[64]) {
    if constexpr (kOut == kStaged) staged(t, chunk, d);
    else scattered(t, chunk, d);
  };
  // kOut == kSum: the thread's two channels' sums of band t, added over its quad's lanes, into y[n K + k].
  auto flush_sums = [&](int t) {
    if constexpr (kOut == kSum) {
      const int n = t / bands_per_image;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float v = sums[h];
        v += __shfl_xor_sync(0xffffffffu, v, 1);
        v += __shfl_xor_sync(0xffffffffu, v, 2);
        const int k = k0 + 16 * q + gq + 8 * h;
        if (tq == 0 && k < g.k) atomicAdd(y + static_cast<int64_t>(n) * g.k + k, v);
        sums[h] = 0.0f;
      }
    }
  };

  int it = 0;
  if (kAhead && static_cast<int>(blockIdx.x) < bands) copy(blockIdx.x, x_s);
  for (int t = blockIdx.x; t < bands; t += gridDim.x, ++it) {
    float* cur = x_s + (kAhead ? (it & 1) * buffer_floats : 0);
    if constexpr (!kAhead) {
      __syncthreads();  // every warp is done with the previous band's planes
      copy(t, cur);
    }
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    __syncthreads();
    split_band<C, kThreads>(cur, pixels, inputs, tid);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // written by threads, read by wgmma
    __syncthreads();
    if constexpr (kAhead) {  // the other buffer's last reader was band t - 1's wgmmas, all waited for before the sync
      if (t + static_cast<int>(gridDim.x) < bands) copy(t + gridDim.x, x_s + ((it + 1) & 1) * buffer_floats);
    }
    const uint32_t x_addr = ff_conv_igemm::smem_addr(cur);
    const int first = wg * kOwn;  // this warpgroup's chunks: first .. first + kOwn - 1
    if constexpr (kPipe) {  // chunk c + 1's wgmmas run while chunk c's epilogue does
      float acc0[64], acc1[64], none[1];
      issue(x_addr, first, acc0, none);
#pragma unroll
      for (int c = 0; c < kOwn; c += 2) {
        issue(x_addr, first + c + 1, acc1, none);
        wgmma_wait<1>();
        fence_accumulators(acc0);
        epilogue(t, first + c, acc0);
        if (c + 2 < kOwn) {
          issue(x_addr, first + c + 2, acc0, none);
          wgmma_wait<1>();
        } else {
          wgmma_wait<0>();
        }
        fence_accumulators(acc1);
        epilogue(t, first + c + 1, acc1);
      }
    } else {
#pragma unroll
      for (int c = 0; c < kOwn; ++c) {
        float acc[64];
        float part[kPartials ? 64 : 1];
        issue(x_addr, first + c, acc, part);
        wgmma_wait<0>();
        fence_accumulators(acc);
        epilogue(t, first + c, acc);
      }
    }
    flush_sums(t);
    // kAhead: `cur` is refilled two bands on, after the next band's split sync, which every warp reaches only when
    // done with this band's chunks
  }
}

template <int C, int KH, int KW, int kChunks, class Epi, bool kPartials, bool kPipe, bool kAhead, int kOut, int kWGs>
int blocks_per_sm(const Geometry& g) {
  int per_sm = 0;
  auto kernel = conv_shift_kernel<C, KH, KW, kChunks, Epi, kPartials, kPipe, kAhead, kOut, kWGs>;
  const size_t smem = smem_bytes<C, KH, KW>(g, kChunks, kAhead, kOut, kWGs);
  if (smem > 227 * 1024) return 0;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024) != cudaSuccess)
    return -static_cast<int>(cudaGetLastError());
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 128 * kWGs, smem);
  return per_sm;
}

template <int C, int KH, int KW, int kChunks, class Epi, bool kPartials, bool kPipe, bool kAhead, int kOut, int kWGs>
int launch(const float* x, const float* w, float* y, const Geometry& g, const Epi& epi, cudaStream_t stream) {
  using Q = Cfg<C, KH, KW>;
  if (g.c != C) return 1001;
  if (g.ow != g.w + 2 * g.pw - (KW - 1) * g.dw || g.oh != g.h + 2 * g.ph - (KH - 1) * g.dh) return 1002;  // stride 1
  const int per_sm = blocks_per_sm<C, KH, KW, kChunks, Epi, kPartials, kPipe, kAhead, kOut, kWGs>(g);
  if (per_sm <= 0) return 1003;  // the band does not fit in shared memory
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (kOut == kSum) cudaMemsetAsync(y, 0, sizeof(float) * static_cast<size_t>(g.n) * g.k, stream);
  const int64_t positions = static_cast<int64_t>(g.oh) * (g.w + 2 * g.pw), band = kChunks * Q::kN;
  const int64_t bands = g.n * ((positions + band - 1) / band);
  const int groups = (g.k + Q::kBM - 1) / Q::kBM;
  const int grid_x = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(bands, sms * per_sm / groups)));
  conv_shift_kernel<C, KH, KW, kChunks, Epi, kPartials, kPipe, kAhead, kOut, kWGs>
      <<<dim3(grid_x, groups), 128 * kWGs, smem_bytes<C, KH, KW>(g, kChunks, kAhead, kOut, kWGs), stream>>>(
          x, w, y, g, band_pixels(g, KH, KW, kChunks), band_inputs(g, KH, KW, kChunks), epi);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace ff_conv_shift_lab
