// shift.cuh -- a few-channel, stride-1 2-D convolution on Hopper tensor cores (3xTF32, fp32-class) whose epilogue's
// values are summed over the output's spatial axes per (sample, channel): the conv kernel of a convolution ending in a
// spatial sum or mean (a global average pool). Needs igemm_ptx.cuh (wgmma, its fences, smem_addr) and direct.cuh
// (cp_async_4, scale_sums, Geometry) before it. sm_90a. Lab and measurements: dev/kernels/conv_wgmma_shift/.
//
// Each tap is a shifted descriptor. A band of the input is laid out as pixels x channels, 4 channels (16 bytes) a
// pixel in each of C/4 planes, the pixels in the padded image's row order (pitch Wp = W + 2 pw). Output position
// i = r Wp + c needs, for tap (kh, kw), input pixel i + kh dh Wp + kw dw: one offset for every position. wgmma's
// K-major operand without swizzle is made of 8-row x 16-byte core matrices whose rows are 16 bytes apart, and its
// descriptor's start address need only be 16-byte aligned: so a tap's B operand (128 positions x 8 channels) is the
// band's planes read from an address moved by its offset x 16 bytes. Positions with c >= OW (the last (KW - 1) dw
// columns of a padded row) and past the image's last row are computed and dropped.
//
// 3xTF32: the band and the weights hold TF32 big parts (round to nearest) and small parts (the rest, rounded); the
// weights are the A operand (64 output channels: a group, blockIdx.y). The tensor cores add each wgmma's products
// into the fp32 sum rounding toward zero; every tap's two small products go first and the big ones last, so 18 of an
// output's 27 accumulations (3x3, 8 channels) happen while the sum is still ~2^-11 of its size: fp32-class (error vs
// float64 ~1e-6 of the output's RMS, measured on the sums ~2-14e-7).
//
// Layouts: x [N, C, H, W], w [K, C, KH, KW], fp32, contiguous; stride 1, any padding and dilation, depth 1.
// A band is kChunks x 128 consecutive output positions of one sample; a block is one warpgroup and walks bands
// persistently with two band buffers (the next band's copy, cp.async with zero-filled padding, in flight while this
// one is computed): per band it splits the copied pixels into their parts in place, then per pair of chunks issues
// chunk c + 1's wgmmas into a second accumulator set while chunk c's epilogue runs. The epilogue applies the functor
// `float operator()(float acc, int k, int64_t at) const` to each kept value (at: its flat index in the NCHW output,
// which is never written), adds a thread's values per channel over the band, its quad's lanes by shuffles, and one
// lane adds the partial into a double per (n, k) (atomicAdd); `launch_spatial_sum` then scales the doubles into the
// float32 result (direct.cuh's scale_sums). The partials arrive in no fixed order: the last bits of the sums may differ
// between runs.
#include <algorithm>

#include "igemm_ptx.cuh"  // wgmma, its fences, smem_addr (pasted here in a generated unit)

namespace ff_conv_shift {

__device__ __forceinline__ uint32_t tf32_round(float v) { return (__float_as_uint(v) + 0x1000u) & 0xFFFFE000u; }

// K-major operand without swizzle: core matrices of 8 rows x 16 bytes, rows 16 bytes apart; `lbo` bytes from a core
// matrix to the next along K (the second 4 channels of a k8 step), `sbo` bytes to the next 8 rows.
__device__ __forceinline__ uint64_t desc_plain(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32);
}

template <int C, int KH, int KW, int kChunks>
struct Cfg {
  static constexpr int kQuads = (C + 7) / 8 * 2;  // 4-channel planes (the padded channels' stay zero)
  static constexpr int kSteps = kQuads / 2;       // k8 steps a tap
  static constexpr int kN = 128, kThreads = 128, kBM = 64, kBand = kChunks * kN;
  static constexpr int kATile = kBM * 8 * 4;  // one tap, k8 step and part: [2 halves of K][64 rows][4 floats]
  static constexpr int kWBytes = KH * KW * kSteps * 2 * kATile;
  static_assert(kChunks % 2 == 0, "chunks go in pairs");
};

// The input pixels a band reads (its positions plus the largest tap offset) and a plane's pixels (a multiple of 8).
inline int band_inputs(const ff_conv_direct::Geometry& g, int kh, int kw, int band) {
  return band + (kh - 1) * g.dh * (g.w + 2 * g.pw) + (kw - 1) * g.dw;
}

template <int C, int KH, int KW, int kChunks>
size_t smem_bytes(const ff_conv_direct::Geometry& g) {
  using Q = Cfg<C, KH, KW, kChunks>;
  const size_t pixels = (band_inputs(g, KH, KW, Q::kBand) + 7) / 8 * 8;
  return Q::kWBytes + 2 * 2 * static_cast<size_t>(Q::kQuads) * pixels * 16 + 1024;  // two buffers of both parts
}

// The pieces of a block's work on its shared memory, shared with the lab's variants (dev/kernels/conv_wgmma_shift):

// The weights of channel group k0 .. k0 + 63 as big and small TF32 parts, per tap and k8 step a [64][8] tile each:
// value (row m, channel 8 step + kk) at (kk / 4) * 1024 + m * 16 + (kk % 4) * 4 bytes (desc_plain(tile, 1024, 128)).
template <int C, int KH, int KW, int kThreads>
__device__ __forceinline__ void stage_weights(unsigned char* w_s, const float* __restrict__ w, int k0, int k_out,
                                              int tid) {
  constexpr int kSteps = (C + 7) / 8, kTile = 64 * 8 * 4;
  for (int i = tid; i < KH * KW * kSteps * 64 * 8; i += kThreads) {
    const int kk = i % 8, m = (i / 8) % 64, step = (i / 8 / 64) % kSteps, tap = i / 8 / 64 / kSteps;
    const int c = 8 * step + kk, k = k0 + m, r = tap / KW, s = tap % KW;
    const float v = (k < k_out && c < C) ? w[((static_cast<size_t>(k) * C + c) * KH + r) * KW + s] : 0.0f;
    const uint32_t big = tf32_round(v);
    unsigned char* tile = w_s + (tap * kSteps + step) * 2 * kTile;
    const int at = (kk / 4) * 1024 + m * 16 + (kk % 4) * 4;
    *reinterpret_cast<uint32_t*>(tile + at) = big;
    *reinterpret_cast<uint32_t*>(tile + kTile + at) = tf32_round(v - __uint_as_float(big));
  }
}

// One band's input: padded pixel j = i0 + p (p < inputs; row j / wp, column j % wp of sample `image`, [C][h][w]) of
// channel c into the big plane c / 4 of `buf` at pixel p, lane c % 4 (cp.async, one group); zero outside the image.
// A thread takes pixels tid, tid + kThreads, ... (one division a band), every channel of each: a warp's lanes on
// consecutive pixels.
template <int C, int kThreads>
__device__ __forceinline__ void copy_band(float* buf, const float* __restrict__ image, const float* __restrict__ any,
                                          int h, int w, int ph, int pw, int i0, int pixels, int inputs, int tid) {
  const int wp = w + 2 * pw;
  int row = (i0 + tid) / wp, col = (i0 + tid) - row * wp;
  for (int p = tid; p < inputs; p += kThreads) {
    const int gh = row - ph, gw = col - pw;
    const bool ok = gh >= 0 && gh < h && gw >= 0 && gw < w;
    const float* src = image + (ok ? static_cast<size_t>(gh) * w + gw : 0);
#pragma unroll
    for (int c = 0; c < C; ++c)
      ff_conv_direct::cp_async_4(buf + (c / 4) * pixels * 4 + p * 4 + c % 4,
                                 ok ? src + static_cast<size_t>(c) * h * w : any, ok);
    col += kThreads;
    while (col >= wp) { col -= wp; ++row; }
  }
  ff_conv_direct::cp_async_commit();
}

// In place over the real channels' planes: big = TF32(x), small (kQuads planes on) = TF32(x - big).
template <int C, int kThreads>
__device__ __forceinline__ void split_band(float* buf, int pixels, int inputs, int tid) {
  constexpr int kQuads = (C + 7) / 8 * 2;
  for (int i = tid; i < (C + 3) / 4 * inputs; i += kThreads) {
    const int quad = i / inputs, p = i % inputs;
    float4* big = reinterpret_cast<float4*>(buf + quad * pixels * 4) + p;
    float4* small = reinterpret_cast<float4*>(buf + (kQuads + quad) * pixels * 4) + p;
    const float4 v = *big;
    const float4 b = make_float4(__uint_as_float(tf32_round(v.x)), __uint_as_float(tf32_round(v.y)),
                                 __uint_as_float(tf32_round(v.z)), __uint_as_float(tf32_round(v.w)));
    *big = b;
    *small = make_float4(__uint_as_float(tf32_round(v.x - b.x)), __uint_as_float(tf32_round(v.y - b.y)),
                         __uint_as_float(tf32_round(v.z - b.z)), __uint_as_float(tf32_round(v.w - b.w)));
  }
}

// The planes' pixels past a band's inputs (read only for dropped positions) and the padded channels' lanes of
// `floats` floats of buffers: zero, for good (copy_band never writes them).
template <int C, int kThreads>
__device__ __forceinline__ void zero_padding(float* x_s, int floats, int pixels, int inputs, int tid) {
  constexpr int kQuads = (C + 7) / 8 * 2;
  for (int i = tid; i < floats; i += kThreads) {
    const int ch = (i / (pixels * 4)) % kQuads * 4 + i % 4, p = (i / 4) % pixels;
    if (ch >= C || p >= inputs) x_s[i] = 0.0f;
  }
}

template <int C, int KH, int KW, int kChunks, class Epi>
__global__ void __launch_bounds__(128)
conv_shift_sum_kernel(const float* __restrict__ x, const float* __restrict__ w, double* __restrict__ sums,
                      const ff_conv_direct::Geometry g, const int pixels, const int inputs, const Epi epi) {
  using ff_conv_igemm::fence_accumulators;
  using ff_conv_igemm::wgmma_commit;
  using ff_conv_igemm::wgmma_fence;
  using ff_conv_igemm::wgmma_n128;
  using ff_conv_igemm::wgmma_wait;
  using Q = Cfg<C, KH, KW, kChunks>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  unsigned char* w_s = smem;                                 // [tap][step][big, small][K half][64][4]
  float* x_s = reinterpret_cast<float*>(smem + Q::kWBytes);  // [buffer][big, small][quad][pixels][4]
  const uint32_t w_addr = ff_conv_igemm::smem_addr(w_s);
  const uint32_t plane_bytes = static_cast<uint32_t>(pixels) * 16;
  const int buffer_floats = 2 * Q::kQuads * pixels * 4;
  const int tid = threadIdx.x, lane = tid & 31, q = tid >> 5, gq = lane >> 2, tq = lane & 3;
  const int k0 = blockIdx.y * Q::kBM;
  const int wp = g.w + 2 * g.pw;
  const int bands_per_image = (g.oh * wp + Q::kBand - 1) / Q::kBand, bands = g.n * bands_per_image;
  const int64_t plane = static_cast<int64_t>(g.oh) * g.ow;

  stage_weights<C, KH, KW, Q::kThreads>(w_s, w, k0, g.k, tid);
  zero_padding<C, Q::kThreads>(x_s, 2 * buffer_floats, pixels, inputs, tid);
  auto copy = [&](int t, float* buf) {
    const int n = t / bands_per_image;
    copy_band<C, Q::kThreads>(buf, x + static_cast<size_t>(n) * C * g.h * g.w, x, g.h, g.w, g.ph, g.pw,
                              (t % bands_per_image) * Q::kBand, pixels, inputs, tid);
  };
  // Chunk `chunk`'s products into d as one group: every tap's small products (a_small.b_big, a_big.b_small) first,
  // then every tap's big one.
  auto issue = [&](uint32_t x_addr, int chunk, float (&d)[64]) {
    const int p0 = chunk * Q::kN;
    asm volatile("" : "+r"(x_addr));  // the descriptors computed where used, not hoisted out and held in registers
    wgmma_fence();
#pragma unroll
    for (int pass = 0; pass < 2; ++pass)
#pragma unroll
      for (int r = 0; r < KH; ++r)
#pragma unroll
        for (int s = 0; s < KW; ++s)
#pragma unroll
          for (int j = 0; j < Q::kSteps; ++j) {
            const uint32_t a = w_addr + ((r * KW + s) * Q::kSteps + j) * 2 * Q::kATile;
            const uint32_t b = x_addr + 2 * j * plane_bytes + (p0 + r * g.dh * wp + s * g.dw) * 16;
            const uint64_t a_big = desc_plain(a, 1024, 128), b_big = desc_plain(b, plane_bytes, 128);
            if (pass == 0) {
              wgmma_n128(d, desc_plain(a + Q::kATile, 1024, 128), b_big, r == 0 && s == 0 && j == 0 ? 0 : 1);
              wgmma_n128(d, a_big, desc_plain(b + Q::kQuads * plane_bytes, plane_bytes, 128));
            } else {
              wgmma_n128(d, a_big, b_big);
            }
          }
    wgmma_commit();
  };
  // Chunk `chunk` of band t: accumulator 4 jj + 2 h + e is channel k0 + 16 q + gq + 8 h at position
  // i0 + chunk * 128 + 8 jj + 2 tq + e (row pos / wp, column pos % wp); kept values added into sums[h].
  float part[2] = {0.0f, 0.0f};
  auto epilogue = [&](int t, int chunk, const float (&d)[64]) {
    const int n = t / bands_per_image, pos0 = (t % bands_per_image) * Q::kBand + chunk * Q::kN + 2 * tq;
    int oh = pos0 / wp, col = pos0 - oh * wp;
#pragma unroll
    for (int jj = 0; jj < 16; ++jj) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        int rr = oh, cc = col + e;
        if (cc >= wp) { cc -= wp; ++rr; }
        if (cc < g.ow && rr < g.oh) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int k = k0 + 16 * q + gq + 8 * h;
            if (k < g.k) part[h] += epi(d[4 * jj + 2 * h + e], k, (static_cast<int64_t>(n) * g.k + k) * plane +
                                                                   static_cast<int64_t>(rr) * g.ow + cc);
          }
        }
      }
      col += 8;
      if (col >= wp) { col -= wp; ++oh; }
    }
  };
  // The thread's two channels' sums over band t, added over its quad's lanes, into the doubles of (n, k).
  auto flush = [&](int t) {
    const int n = t / bands_per_image;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float v = part[h];
      v += __shfl_xor_sync(0xffffffffu, v, 1);
      v += __shfl_xor_sync(0xffffffffu, v, 2);
      const int k = k0 + 16 * q + gq + 8 * h;
      if (tq == 0 && k < g.k) atomicAdd(sums + static_cast<int64_t>(n) * g.k + k, static_cast<double>(v));
      part[h] = 0.0f;
    }
  };

  int it = 0;
  if (static_cast<int>(blockIdx.x) < bands) copy(blockIdx.x, x_s);
  for (int t = blockIdx.x; t < bands; t += gridDim.x, ++it) {
    float* cur = x_s + (it & 1) * buffer_floats;
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    __syncthreads();
    split_band<C, Q::kThreads>(cur, pixels, inputs, tid);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // written by threads, read by wgmma
    __syncthreads();
    // The other buffer's last reader was band t - 1's wgmmas, each waited for before this band's first sync.
    if (t + static_cast<int>(gridDim.x) < bands) copy(t + gridDim.x, x_s + ((it + 1) & 1) * buffer_floats);
    const uint32_t x_addr = ff_conv_igemm::smem_addr(cur);
    float acc0[64], acc1[64];
    issue(x_addr, 0, acc0);
#pragma unroll
    for (int c = 0; c < kChunks; c += 2) {  // unrolled: ptxas must see which accumulators each wait has finished
      issue(x_addr, c + 1, acc1);
      wgmma_wait<1>();
      fence_accumulators(acc0);
      epilogue(t, c, acc0);
      if (c + 2 < kChunks) {
        issue(x_addr, c + 2, acc0);
        wgmma_wait<1>();
      } else {
        wgmma_wait<0>();
      }
      fence_accumulators(acc1);
      epilogue(t, c + 1, acc1);
    }
    flush(t);
  }
}

// The spatial sum of the epilogue's values per (n, k), times `scale`: out [N * K] = scale * sum over (oh, ow) of
// epi(conv(x, w)); `sums` is scratch of N * K doubles (zeroed here). The geometry's depth, strides and depth padding
// must be 1, 1 and 0 (the plan chose this kernel for such a convolution only).
template <int C, int KH, int KW, int kChunks, class Epi>
cudaError_t launch_spatial_sum(const float* x, const float* w, double* sums, float* out,
                               const ff_conv_direct::Geometry& g, const Epi& epi, double scale, cudaStream_t stream) {
  using Q = Cfg<C, KH, KW, kChunks>;
  if (g.c != C || g.d != 1 || g.od != 1 || g.sd != 1 || g.sh != 1 || g.sw != 1 || g.pd != 0) return cudaErrorInvalidValue;
  const int64_t count = static_cast<int64_t>(g.n) * g.k;
  if (count == 0) return cudaSuccess;
  auto kernel = conv_shift_sum_kernel<C, KH, KW, kChunks, Epi>;
  const size_t smem = smem_bytes<C, KH, KW, kChunks>(g);
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  int device = 0, sms = 0, per_sm = 0;
  if ((err = cudaGetDevice(&device)) != cudaSuccess) return err;
  if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return err;
  if ((err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Q::kThreads, smem)) != cudaSuccess)
    return err;
  if (per_sm == 0) return cudaErrorInvalidConfiguration;  // the band does not fit in shared memory
  if ((err = cudaMemsetAsync(sums, 0, sizeof(double) * static_cast<size_t>(count), stream)) != cudaSuccess) return err;
  const int64_t positions = static_cast<int64_t>(g.oh) * (g.w + 2 * g.pw);
  const int64_t bands = g.n * ((positions + Q::kBand - 1) / Q::kBand);
  const int groups = (g.k + Q::kBM - 1) / Q::kBM;
  if (bands > (1LL << 31) - 1 || groups > 65535) return cudaErrorInvalidValue;
  const int64_t resident = std::max<int64_t>(1, static_cast<int64_t>(per_sm) * sms / groups);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(bands, resident));
  const int inputs = band_inputs(g, KH, KW, Q::kBand);
  kernel<<<dim3(blocks, groups), Q::kThreads, smem, stream>>>(x, w, sums, g, (inputs + 7) / 8 * 8, inputs, epi);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  ff_conv_direct::scale_sums<><<<static_cast<unsigned>((count + 255) / 256), 256, 0, stream>>>(sums, out, count, scale);
  return cudaGetLastError();
}

}  // namespace ff_conv_shift
