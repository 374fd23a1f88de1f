// igemm.cuh -- implicit-GEMM convolution on Hopper tensor cores with a fused epilogue: the conv family's kernel for
// TF32-class convolutions (TF32 products) and, in its 3xTF32 form (kSplit, see "3xTF32" above the kernel), for
// fp32-class ones (its labs, with the benches and the variants measured there: dev/kernels/conv_igemm/). Only CUDA
// headers. sm_90a (wgmma, TMA).
//
// What it computes. y = epi(conv(x, w)) for a 2-D or 3-D convolution with stride 1, any padding and
// dilation, one group: y[n, k, od, oh, ow] = sum_{c, kd, kh, kw} x[n, c, od + kd*dd - pd, oh + kh*dh - ph,
// ow + kw*dw - pw] * w[k, c, kd, kh, kw] (zero outside x), then the epilogue functor per element.
//
// The GEMM. M = output pixels, N = output channels, K = taps x channels. A block computes a tile of
// BM = 128 pixels (a BD x BH x BW box of one image) by BN output channels (kM = 256 pixels on the TF32 channels-last
// path: each consumer warpgroup then owns 128 rows, two m64 wgmmas a k8 step, and the weight tile serves twice the
// pixels: 25 % less L2 traffic a FLOP). Its K loop runs over the taps
// (kd, kh, kw) and, per tap, over blocks of 32 input channels: each k-tile's A operand is the input
// shifted by the tap, a box of the channels-last input read by TMA (cp.async.bulk.tensor.5d) at
// coordinates (c0, ow0 + kw*dw - pw, oh0 + kh*dh - ph, od0 + kd*dd - pd, n). The copy engine zero-fills
// every coordinate outside the tensor (negative ones too): that is the padding, and channels past C.
// A box row is one pixel's 32 channels = 128 bytes, so the box lands in shared memory as a [128 pixels]
// [32 k] K-major tile in the 128-byte swizzle, the layout wgmma reads through a descriptor. The B operand is
// the weight re-laid as [K_out][taps][Cq] (Cq = C rounded up to 32, zero-padded), a 2-D K-major matrix
// read in boxes of 32 k x BN rows, the same as the project's GEMM.
//
// Inputs prepared by the caller: w as [K_out][taps][Cq], rounded to TF32 (round to nearest) so that the
// tensor core's reading of a .tf32 operand (it drops the low 13 bits, a truncation toward zero) changes
// nothing: the products' error is then unbiased, as in eager's TF32 convolution; x either as the model's own
// NC(D)HW tensor (kNchw, described above the kernel) or as the channels-last copy prepare_input_kernel
// makes: N x D x H x W x Cp (Cp = C rounded up to 4, for TMA's 16-byte strides), rounded the same way.
//
// A transposed convolution (stride s, padding p, dilation 1, window k >= s per axis; weight [C, K, window]):
// y[o] = sum_{i, t : i s - p + t = o} x[i] w[t] per axis. Its outputs of one parity class o = s q + r take the taps
// t = t0 + s j (t0 = (r + p) mod s, j < J = ceil((k - t0) / s)) at inputs i = q + e - j (e = (r + p - t0) / s): an
// ordinary stride-1 convolution of x over q with the J taps in reverse, u = J - 1 - j, and padding J - 1 - e (below
// zero where the class's first output reads past x's first element). launch_transposed re-lays the weight with each
// class's taps together ([K][taps][Cq], every tap in exactly one class) and launches the kernel once for all classes:
// a block computes one class's tile (`Parities`, the class fastest after the channel tile, so that the classes of one
// output box store side by side), storing every s-th output pixel from r (`Geometry::sd`.., `out_pixel`).
//
// Measured on an H100 (bench/results/2026-11-27b_h100/): error vs float64 equal to cuDNN's TF32 error on every
// TF32-class shape of the problem models; conv + bias + relu 1.4-2.0x faster than eager at 16 or more input
// channels, at parity with torch.compile on 64-channel 3x3 convolutions.
//
// Roles (288 threads): warpgroups 0 and 1 consume (rows kM/2 w .. kM/2 w + kM/2 - 1 of the tile, wgmma
// m64nBNk8 tf32, both operands from shared memory); warp 8 produces (one thread issues the two TMA boxes
// of each k-tile into the next free slot of a ring of kStages). Barriers per slot: full (the producer's
// expect_tx arrival and the copies' bytes) and empty (one arrival per consumer warp once the wgmmas that
// read the slot completed). Accumulation: every k-tile's 4 wgmmas chain into one fp32 accumulator per
// element (the tensor core's accumulation, as cuDNN's TF32 kernels).
//
// Epilogue: the functor is called per output element as epi(acc, k, at) with k the output channel and at
// the flat NC(D)HW index of the element (the conv family's interface); stores are bounds-checked. The
// accumulator fragment of m64nN: warp q of the warpgroup holds rows 16q + g and 16q + g + 8, columns
// 8j + 2t and 8j + 2t + 1 (g = lane / 4, t = lane % 4): a warp's store of one register writes 8 consecutive
// pixels of 4 channels (four 32-byte segments).

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "igemm_ptx.cuh"  // barriers, TMA, clusters, wgmma (pasted here in a generated unit)

namespace ff_conv_igemm {

constexpr int kBM = 128;             // output pixels per tile
constexpr int kBK = 32;              // channels per k-tile (one 128-byte swizzle row)
constexpr int kConsumers = 256;      // two warpgroups
// What the kernel does with the epilogue's values: stores them; reduces them over the channels (one value a pixel,
// `reduce_tile`); stores them and adds each unit's sum and sum of squares for a channel norm (`store_tile_stats`).
enum Output { kStore = 0, kChannelReduce = 1, kStoreStats = 2 };
constexpr int kThreads = kConsumers + 32;

struct Geometry {
  int n, c, cp, cq;            // batch, input channels, channels-last stride, channels per tap in w
  int d, h, w;                 // input size
  int k;                       // output channels
  int od, oh, ow;              // output size
  int kd, kh, kw;              // window
  int pd, ph, pw;              // padding
  int dd, dh, dw;              // dilation
  int bd, bh, bw;              // pixel box of a tile (bd * bh * bw == 128)
  int bwb;                     // NCHW input: width of the A box (bw plus columns that spread the banks)
  // Where the output pixels go: pixel (od, oh, ow) of this launch is pixel (od sd + rd, oh sh + rh, ow sw + rw) of an
  // output of fd x fh x fw (0: od x oh x ow). An ordinary convolution writes its own grid (stride 1, offset 0); a
  // transposed one computes its output parity classes (`Parities`), each writing every s-th pixel from its offset r.
  int sd = 1, sh = 1, sw = 1;
  int rd = 0, rh = 0, rw = 0;
  int fd = 0, fh = 0, fw = 0;
  int tap0 = 0;  // the first of this launch's taps in the re-laid weight's rows
};

// The output parity classes one launch computes (a block takes class blockIdx / k-tiles mod n): each one's window,
// padding, output extents, offset r and first tap, over the launch's Geometry. One class (the Geometry's own
// values) for an ordinary convolution; class 0 has the largest extents (the tile grid's).
struct Parity {
  int kd, kh, kw, pd, ph, pw, od, oh, ow, rd, rh, rw, tap0;
};
constexpr int kMaxParities = 8;
struct Parities {
  int n;
  Parity c[kMaxParities];
};

__device__ __forceinline__ Geometry of_class(const Geometry& whole, const Parity& p) {
  Geometry g = whole;
  g.kd = p.kd, g.kh = p.kh, g.kw = p.kw;
  g.pd = p.pd, g.ph = p.ph, g.pw = p.pw;
  g.od = p.od, g.oh = p.oh, g.ow = p.ow;
  g.rd = p.rd, g.rh = p.rh, g.rw = p.rw;
  g.tap0 = p.tap0;
  return g;
}

// The producer's walk over a tile's K loop: channel block cb fastest, then the tap's column, row and depth (the order
// of the re-laid weight's rows); the NCHW consumers walk its first two the same way.
struct TapWalk {
  int cb = 0, kw = 0, kh = 0, kd = 0;
  __device__ __forceinline__ void advance(const Geometry& g, int cblocks) {
    if (++cb < cblocks) return;
    cb = 0;
    if (++kw < g.kw) return;
    kw = 0;
    if (++kh < g.kh) return;
    kh = 0;
    ++kd;
  }
};

// The flat index of this launch's output pixel (od, oh, ow) in its plane of fd x fh x fw pixels.
__device__ __forceinline__ long long out_pixel(const Geometry& g, int od, int oh, int ow) {
  return (static_cast<long long>(od * g.sd + g.rd) * g.fh + (oh * g.sh + g.rh)) * g.fw + (ow * g.sw + g.rw);
}

// The output pixel of the consumer thread `tid`'s accumulator row (m, half) in a tile of kM pixels at (od0, oh0, ow0):
// row r = kM/2 w + 64 m + 16 q + g + 8 half is pixel (r / (bw bh), (r / bw) % bh, r % bw) of the tile's box. Returns
// whether it lies inside the output, and sets `pix` to its flat index in its plane (`out_pixel`; 0 outside).
template <int kM>
__device__ __forceinline__ bool row_pixel(const Geometry& g, int tid, int m, int half, int ow0, int oh0, int od0,
                                          long long& pix) {
  const int r = kM / 2 * (tid >> 7) + 64 * m + 16 * ((tid & 127) >> 5) + ((tid & 31) >> 2) + 8 * half;
  const int ow = ow0 + r % g.bw, oh = oh0 + (r / g.bw) % g.bh, od = od0 + r / (g.bw * g.bh);
  const bool inside = ow < g.ow && oh < g.oh && od < g.od;
  pix = inside ? out_pixel(g, od, oh, ow) : 0;
  return inside;
}

// Whether an epilogue functor writes outputs of its own (`kWritesOutputs`; true where it does not say): then it runs
// only for the pixels inside the output. One that writes nothing else runs for every row of the thread, a row outside
// the output reading its operands at pixel 0 (inside) and storing nothing, so that the operand loads of one channel
// are the same in every row and the compiler loads them once (plain loads: the generated functors').
template <class E, class = void>
struct WritesOutputs { static constexpr bool value = true; };
template <class E>
struct WritesOutputs<E, decltype(void(E::kWritesOutputs))> { static constexpr bool value = E::kWritesOutputs; };

// The epilogue of one tile (both kernels): the consumer thread `tid` (of kConsumers) holds the m64nBN accumulator
// fragment of rows 64 w + 16 q + g (+ 8) of the tile, columns 8j + 2t + e; the tile's pixel r is (r / (bw bh),
// (r / bw) % bh, r % bw) of the box at (od0, oh0, ow0) of image img, its channels k0 .. k0 + kBN - 1. Bounds-checked.
// kStaged: through shared memory (`stage`, over the ring, free once both warpgroups are past their last wgmma; the
// lab's TF32 instances only: the persistent 3xTF32 kernel's ring holds the next tile's loads meanwhile):
// the accumulators go to a [kBN][kBM + 4] tile, then each warp stores whole rows of one channel, 32 consecutive
// pixels a store (128 bytes where bw = 32). A fragment write of lane (g, t) goes to word (8j + 2t + e) * 132 + 16q +
// g: 2t * 132 = 8t (mod 32), so a warp's 32 writes land in 32 banks. Otherwise straight from the fragment.
template <int kBN, bool kStaged, int kM, class Epilogue>
__device__ __forceinline__ void store_tile(float* __restrict__ y, const Geometry& g,
                                           const float (&acc)[kM / kBM][kBN / 2], int k0, int ow0, int oh0, int od0,
                                           int img, float* stage, int tid, Epilogue& epi) {
  const int cw = tid >> 7, q = (tid & 127) >> 5, lane = tid & 31, gq = lane >> 2, tq = lane & 3;
  const long long plane = static_cast<long long>(g.fd) * g.fh * g.fw;
  static_assert(!kStaged || kM == kBM, "the staged epilogue takes tiles of 128 pixels");
  if constexpr (kStaged) {
    constexpr int kRowStride = kBM + 4;
    asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory");
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = 64 * cw + 16 * q + gq + 8 * half;
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) stage[(8 * j + 2 * tq + e) * kRowStride + r] = acc[0][4 * j + 2 * half + e];
      }
    }
    asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory");
    for (int kc = tid >> 5; kc < kBN; kc += kConsumers / 32) {
      const int k = k0 + kc;
      if (k >= g.k) break;
      const long long chan = (static_cast<long long>(img) * g.k + k) * plane;
#pragma unroll
      for (int p = lane; p < kBM; p += 32) {
        const int pw = p % g.bw, ph = (p / g.bw) % g.bh, pd = p / (g.bw * g.bh);
        const int ow = ow0 + pw, oh = oh0 + ph, od = od0 + pd;
        if (ow < g.ow && oh < g.oh && od < g.od) {
          const long long at = chan + out_pixel(g, od, oh, ow);
          y[at] = epi(stage[kc * kRowStride + p], k, at);
        }
      }
    }
  } else {
    // The rows' pixels first, then channel by channel (as store_tile_stats): one 64-bit product a channel, not an
    // element, and a per-channel operand of the functor is loaded once for the thread's rows of that channel
    // (H200, 17's TF32 convolution: the element-by-element form spent half the consumers' time in the epilogue).
    long long pix[kM / kBM][2];
    bool inside[kM / kBM][2];
#pragma unroll
    for (int m = 0; m < kM / kBM; ++m) {  // the warpgroup's rows: kM / 2 of them, 64 a wgmma
#pragma unroll
      for (int half = 0; half < 2; ++half) inside[m][half] = row_pixel<kM>(g, tid, m, half, ow0, oh0, od0, pix[m][half]);
    }
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int k = k0 + 8 * j + 2 * tq + e;
        if (k >= g.k) continue;
        const long long chan = (static_cast<long long>(img) * g.k + k) * plane;
#pragma unroll
        for (int m = 0; m < kM / kBM; ++m) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const long long at = chan + pix[m][half];
            if constexpr (WritesOutputs<Epilogue>::value) {
              if (inside[m][half]) y[at] = epi(acc[m][4 * j + 2 * half + e], k, at);
            } else {
              const float v = epi(acc[m][4 * j + 2 * half + e], k, at);
              if (inside[m][half]) y[at] = v;
            }
          }
        }
      }
    }
  }
}

// The epilogue of a tile that holds every output channel (kOut = kChannelReduce; K <= kBN): each pixel's values, the
// functor's epi(acc, k, at) for k < K, reduced over the channels with its init / combine / finish, one value a pixel
// into y = [N, (1,) OD, OH, OW]. A thread combines its kBN / 4 channels of a row (in channel order), then the row's
// four lanes (t = 0..3) combine theirs through two shuffles, in a fixed order; lane t = 0 stores. Every lane takes
// part in the shuffles; a pixel outside the output reads nothing and stores nothing.
template <int kBN, int kM, class Epilogue>
__device__ __forceinline__ void reduce_tile(float* __restrict__ y, const Geometry& g,
                                            const float (&acc)[kM / kBM][kBN / 2], int ow0, int oh0, int od0, int img,
                                            int tid, Epilogue& epi) {
  const int tq = tid & 3;  // the lane's channels: 8 j + 2 tq + e
  const long long plane = static_cast<long long>(g.fd) * g.fh * g.fw;
#pragma unroll
  for (int m = 0; m < kM / kBM; ++m) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      long long pix;
      const bool inside = row_pixel<kM>(g, tid, m, half, ow0, oh0, od0, pix);
      float v = epi.init();
      if (inside) {
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int k = 8 * j + 2 * tq + e;
            if (k < g.k) {
              const long long at = (static_cast<long long>(img) * g.k + k) * plane + pix;
              v = epi.combine(v, epi(acc[m][4 * j + 2 * half + e], k, at));
            }
          }
        }
      }
      v = epi.combine(v, __shfl_xor_sync(0xffffffffu, v, 1));
      v = epi.combine(v, __shfl_xor_sync(0xffffffffu, v, 2));
      if (inside && tq == 0) y[img * plane + pix] = epi.finish(v);
    }
  }
}

// The tile stored as store_tile stores it (straight from the fragment), and per output channel of the tile the sum
// and sum of squares of its stored values added into `stats` ([kBN][2] doubles in shared memory, zeroed before): a
// thread adds its values of a channel in double, the 8 lanes that hold the channel (g = 0..7) add theirs through
// three shuffles, and lane g = 0 adds the warp's into `stats`. Every lane takes part in the shuffles.
template <int kBN, int kM, class Epilogue>
__device__ __forceinline__ void store_tile_stats(float* __restrict__ y, const Geometry& g,
                                                 const float (&acc)[kM / kBM][kBN / 2], int k0, int ow0, int oh0,
                                                 int od0, int img, int tid, Epilogue& epi, double* stats) {
  const int gq = (tid & 31) >> 2, tq = tid & 3;  // the lane's rows (by g) and channels (8 j + 2 tq + e)
  const long long plane = static_cast<long long>(g.fd) * g.fh * g.fw;
  long long pix[kM / kBM][2];
  bool inside[kM / kBM][2];
#pragma unroll
  for (int m = 0; m < kM / kBM; ++m) {
#pragma unroll
    for (int half = 0; half < 2; ++half) inside[m][half] = row_pixel<kM>(g, tid, m, half, ow0, oh0, od0, pix[m][half]);
  }
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int kc = 8 * j + 2 * tq + e, k = k0 + kc;
      double sum = 0.0, squares = 0.0;
      if (k < g.k) {
        const long long chan = (static_cast<long long>(img) * g.k + k) * plane;
#pragma unroll
        for (int m = 0; m < kM / kBM; ++m) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            if (!inside[m][half]) continue;
            const long long at = chan + pix[m][half];
            const float v = epi(acc[m][4 * j + 2 * half + e], k, at);
            y[at] = v;
            sum += static_cast<double>(v);
            squares = fma(static_cast<double>(v), static_cast<double>(v), squares);
          }
        }
      }
#pragma unroll
      for (int lanes = 4; lanes < 32; lanes *= 2) {
        sum += __shfl_xor_sync(0xffffffffu, sum, lanes);
        squares += __shfl_xor_sync(0xffffffffu, squares, lanes);
      }
      if (gq == 0 && k < g.k) {
        atomicAdd(stats + 2 * kc, sum);
        atomicAdd(stats + 2 * kc + 1, squares);
      }
    }
  }
}

// ------------------------------------------------------------------------------------------- the kernel
// kNchw false: x is the channels-last copy (prepare_input); A boxes land K-major in the 128-byte swizzle and
// the wgmmas read both operands from shared memory.
// kNchw true: x is the model's own NC(D)HW tensor (W a multiple of 4, for TMA's 16-byte strides); the tensor
// map orders its dimensions (W, C, H, D, N) and a box of bwb x 32 x bh x bd lands as [d][h][c][w]; the
// consumers read their A fragments with scalar shared loads, round them to TF32 (the half-ulp add: the tensor
// core drops the low 13 bits) and issue wgmmas with A from registers. Lane (g, t) reads rows g, g + 8 at
// channels t, t + 4 of a k8 step: words w + c * bwb apart, so bwb = 8 (mod 16) puts the warp's 32 reads in
// 32 different banks. A box's first column must be a multiple of 4 (TMA faults with an illegal instruction
// otherwise), so it starts up to 3 columns left of the tap's first input column and bwb >= bw + 3:
// bw 32 -> bwb 40, 16 -> 24, 8 -> 12 (2-way conflicts there); the extra columns are loaded and not used.
// Tile t: output-channel tile fastest (the blocks sharing an A box run side by side), then w, h, d boxes,
// then the image.
//
// Chunks (channels-last path). A k-tile of the K loop holds kChunks chunks, each one tap's kKc consecutive
// channels: kKc = 32 (one 128-byte swizzle row a pixel, one chunk a k-tile, 4 k8 steps) or kKc = 8 (one 32-byte
// swizzle row, one k8 step; kChunks = 1..4 taps a k-tile), for few input channels, where 32-channel chunks would be
// mostly zeros. A slot holds the chunks' A boxes, then their B tiles.
//
// 3xTF32 (kSplit, the channels-last path): each operand value v is two TF32 values, big = v rounded to TF32 (nearest)
// and small = v - big in fp32 (exact; the tensor core's truncation of it errs either way), the copy and the weight
// laid out twice: the small parts as images n + N of the input copy and rows K + k of the weight. A slot holds both
// halves (big, then small). Per k-tile the consumers compute
//     part = a_small . b_big + a_big . b_small + a_big . b_big     (small . small dropped: 2^-22 relative)
// into a fresh accumulator (the small products first: each wgmma's accumulation rounds its running sum toward zero,
// which shrinks a sum that is still small the least), wait for it, and add it into the running sum with an ordinary
// fp32 add (round to nearest): the GEMM family's 3xTF32 scheme (families/gemm/gemm_3xtf32.cu, "Accumulation"). The
// products then carry fp32's precision: fp32-class convolutions, where eager's cuDNN runs exact fp32.
// kPersistent: the launch is persistent (a block computes a run of tiles, see the kernel), else a block a tile. The
// 3xTF32 kernel runs persistent; the TF32 one as its instance says.
constexpr int kMaxDevices = 16;  // the persistent launch remembers its grid for this many devices

template <bool kNchw, int kBN, int kKc = kBK, int kChunks = 1, bool kSplit = false, int kM = kBM>
struct Slot {
  static_assert(kKc * kChunks <= kBK && (kKc == kBK || !kNchw), "the NCHW path takes one 32-channel chunk a k-tile");
  static_assert(!kSplit || !kNchw, "3xTF32 reads the channels-last copy");
  static_assert(kM == kBM || (kM == 2 * kBM && !kNchw && !kSplit), "tiles of 256 pixels: the TF32 channels-last path");
  static constexpr int kAChunk = kM * kKc * 4;    // one chunk's A box: kM pixels x kKc channels
  static constexpr int kBChunk = kBN * kKc * 4;   // one chunk's B tile: kBN output channels x kKc
  static constexpr int kABytes = kNchw ? 24576 : kChunks * kAChunk;  // the largest NCHW box: 24 x 32 x 8 floats
  static constexpr int kHalf = kABytes + kChunks * kBChunk;          // the A boxes, then the B tiles
  static constexpr int kBytes = kHalf * (kSplit ? 2 : 1);            // 3xTF32: the big half, then the small
};

template <bool kNchw, int kBN, int kStages, int kMinBlocks, bool kStaged, class Epilogue, int kKc = kBK,
          int kChunks = 1, bool kSplit = false, bool kPersistent = kSplit, int kM = kBM, int kCluster = 1,
          int kOut = kStore>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    conv_igemm_kernel(float* __restrict__ y, const Geometry whole, const __grid_constant__ Parities par,
                      const __grid_constant__ CUtensorMap xmap, const __grid_constant__ CUtensorMap wmap, Epilogue epi,
                      double* __restrict__ sums, int stat_groups) {
  using Layout = Slot<kNchw, kBN, kKc, kChunks, kSplit, kM>;
  static_assert(!(kPersistent && kStaged), "a staged epilogue would overwrite the ring the next tile loads into");
  static_assert(kCluster == 1 || (kCluster == 2 && !kNchw && !kSplit && !kPersistent && !kStaged && kKc == kBK &&
                                  kChunks == 1), "clusters: the TF32 channels-last path, a block a tile");
  static_assert(kOut != kStoreStats || (!kPersistent && !kStaged && kCluster == 1), "statistics: a block a tile");
  // kStoreStats: the tile's per-channel sums, added into `sums` per unit once the tile is stored
  __shared__ double stats_s[kOut == kStoreStats ? 2 * kBN : 1];
  constexpr int kSlotBytes = Layout::kBytes;
  constexpr int kABytes = Layout::kABytes;
  constexpr int kAcc = kBN / 2;  // accumulators per consumer thread and wgmma (64 rows x kBN / 128 threads)
  constexpr int kRowMmas = kM / kBM;  // wgmmas a k8 step per warpgroup: its kM / 2 rows, 64 each
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t ring = raw + ((1024u - (raw & 1023u)) & 1023u);
  const uint32_t full_bar = ring + kStages * kSlotBytes;
  const uint32_t empty_bar = full_bar + 8 * kStages;

  const int tid = static_cast<int>(threadIdx.x);
  const int k_tiles = (whole.k + kBN - 1) / kBN;
  const int w_tiles = (par.c[0].ow + whole.bw - 1) / whole.bw;
  const int h_tiles = (par.c[0].oh + whole.bh - 1) / whole.bh;
  const int d_tiles = (par.c[0].od + whole.bd - 1) / whole.bd;
  const int tiles = k_tiles * par.n * w_tiles * h_tiles * d_tiles * whole.n;  // the launch checks it fits an int
  // Tile t: output-channel tile fastest, then the class (the classes of one output box run side by side: their
  // stores fill each other's sectors while they are in L2), then w, h, d boxes, then the image. A block computes
  // tiles blockIdx.x, + gridDim.x, ... (one, unless the launch is persistent), its ring's slots and phases
  // running on from one tile to the next, so the next tile's loads overlap this one's last products and stores.
  struct Tile {
    Geometry g;
    int k0, ow0, oh0, od0, img, iters;
  };
  auto tile_at = [&](int t) {
    Tile u;
    u.k0 = (t % k_tiles) * kBN;
    t /= k_tiles;
    u.g = of_class(whole, par.c[t % par.n]);
    t /= par.n;
    u.ow0 = (t % w_tiles) * u.g.bw;
    t /= w_tiles;
    u.oh0 = (t % h_tiles) * u.g.bh;
    t /= h_tiles;
    u.od0 = (t % d_tiles) * u.g.bd;
    u.img = t / d_tiles;
    // k-tiles (the launch checks that kChunks divides every class's chunks)
    u.iters = u.g.kd * u.g.kh * u.g.kw * (u.g.cq / kKc) / kChunks;
    return u;
  };
  auto next_tile = [&](int t) { return kPersistent ? t + static_cast<int>(gridDim.x) : tiles; };
  // Clusters of two (kCluster 2): the two blocks of a cluster compute two output boxes of one channel tile; each loads
  // its own A boxes and half of each B tile, written into both blocks' slot (multicast), so that the weight is read
  // from L2 once for two boxes. A slot is refilled once both blocks' consumers are done with it: each consumer warp
  // arrives on its own block's empty barrier and on the other's. Block pair p, rank r: channel tile p % k_tiles, box
  // 2 (p / k_tiles) + r; with an odd number of boxes the last pair's second block loads the last box again and stores
  // nothing. One parity class (an ordinary convolution): both boxes walk the same taps.
  const uint32_t rank = kCluster > 1 ? cluster_rank() : 0u;
  int first = static_cast<int>(blockIdx.x);
  bool stores = true;
  if constexpr (kCluster > 1) {
    const int pair = first / kCluster, boxes = tiles / k_tiles;
    int box = kCluster * (pair / k_tiles) + static_cast<int>(rank);
    stores = box < boxes;
    box = stores ? box : boxes - 1;
    first = pair % k_tiles + k_tiles * box;
  }

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full_bar + 8 * s, 1);
      mbar_init(empty_bar + 8 * s, kCluster * kConsumers / 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if constexpr (kCluster > 1) {
    __syncwarp();    // thread 0's warp converged before the aligned cluster barrier
    cluster_sync();  // the other block's barriers are initialised before anything is written into them
  } else {
    __syncthreads();
  }

  if (tid >= kConsumers) {
    // ---------------------------------------------------------------- producer (warp 8, one thread)
    if (tid == kConsumers) {
      uint32_t s = 0, phase = 0;
      for (int t = first; t < tiles; t = next_tile(t)) {
        const Tile u = tile_at(t);
        const Geometry& g = u.g;
        const int k0 = u.k0, ow0 = u.ow0, oh0 = u.oh0, od0 = u.od0, img = u.img, cblocks = g.cq / kKc;
        const uint32_t a_bytes =
            kNchw ? static_cast<uint32_t>(g.bwb * kBK * g.bh * g.bd * 4) : static_cast<uint32_t>(Layout::kAChunk);
        const uint32_t tile_bytes = (kSplit ? 2u : 1u) * kChunks * (a_bytes + Layout::kBChunk);
        TapWalk at;
        for (int it = 0; it < u.iters; ++it) {
          mbar_wait(empty_bar + 8 * s, phase ^ 1u);  // passes at once on each slot's first use
          const uint32_t slot = ring + s * kSlotBytes, full = full_bar + 8 * s;
          mbar_arrive_expect_tx(full, tile_bytes);
#pragma unroll
          for (int ch = 0; ch < kChunks; ++ch) {
            const uint32_t a = slot + ch * Layout::kAChunk, b = slot + kABytes + ch * Layout::kBChunk;
            const int iw = ow0 + at.kw * g.dw - g.pw, ih = oh0 + at.kh * g.dh - g.ph, id = od0 + at.kd * g.dd - g.pd;
            const int k_col = (g.tap0 + (at.kd * g.kh + at.kh) * g.kw + at.kw) * g.cq + at.cb * kKc;
            if constexpr (kNchw) {
              // the box starts at a multiple of 4 floats (TMA faults with an illegal instruction on an innermost
              // coordinate that is not 16-byte aligned); the consumers skip the (iw & 3) columns before it
              tma_load_5d(a, &xmap, iw & ~3, at.cb * kBK, ih, id, img, full);
            } else {
              tma_load_5d(a, &xmap, at.cb * kKc, iw, ih, id, img, full);
            }
            if constexpr (kCluster > 1) {  // this block's rows of the B tile, into every block of the cluster
              constexpr uint32_t kPart = Layout::kBChunk / kCluster;
              tma_load_2d_multicast(b + rank * kPart, &wmap, k_col, k0 + static_cast<int>(rank) * (kBN / kCluster),
                                    full, static_cast<uint16_t>((1u << kCluster) - 1u));
            } else {
              tma_load_2d(b, &wmap, k_col, k0, full);
            }
            if constexpr (kSplit) {  // the small parts: images n + N of the copy, rows K + k of the weight
              tma_load_5d(a + Layout::kHalf, &xmap, at.cb * kKc, iw, ih, id, img + g.n, full);
              tma_load_2d(b + Layout::kHalf, &wmap, k_col, g.k + k0, full);
            }
            at.advance(g, cblocks);
          }
          if (++s == kStages) {
            s = 0;
            phase ^= 1u;
          }
        }
      }
    }
    if constexpr (kCluster > 1) {  // the producer warp's part in the cluster's last barrier (the warp converged first)
      __syncwarp();
      cluster_sync();
    }
    return;
  }

  // ------------------------------------------------------------------ consumers (warpgroups 0, 1)
  const int cw = tid >> 7;
  const int lane = tid & 31;
  const int q = (tid & 127) >> 5;
  const int gq = lane >> 2;
  const int tq = lane & 3;
  uint32_t s = 0, phase = 0;
  float part[kSplit ? kAcc : 1];  // 3xTF32: a k-tile's products, added into acc once complete
#pragma unroll
  for (int i = 0; i < (kSplit ? kAcc : 1); ++i) part[i] = 0.0f;
  if constexpr (kOut == kStoreStats) {  // zeroed before the tile's epilogue adds into them (the consumers' barrier)
    for (int i = tid; i < 2 * kBN; i += kConsumers) stats_s[i] = 0.0;
    asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory");
  }
  // a consumer warp's release of a slot: to its block's producer and, in a cluster, to the other block's
  auto release = [&](uint32_t slot) {
    mbar_arrive(empty_bar + 8 * slot);
    if constexpr (kCluster > 1) mbar_arrive_cluster(empty_bar + 8 * slot, rank ^ 1u);
  };
#pragma unroll 1
  for (int t = first; t < tiles; t = next_tile(t)) {
    const Tile u = tile_at(t);
    const Geometry& g = u.g;
    const int iters = u.iters, ow0 = u.ow0;
    float acc[kRowMmas][kAcc];
#pragma unroll
    for (int m = 0; m < kRowMmas; ++m) {
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[m][i] = 0.0f;
    }

    if constexpr (!kNchw && !kSplit) {
      uint32_t prev = 0;
#pragma unroll 1
      for (int it = 0; it < iters; ++it) {
        mbar_wait(full_bar + 8 * s, phase);
        const uint32_t a = ring + s * kSlotBytes + cw * (kM / 2) * kKc * 4;  // the warpgroup's rows
        const uint32_t b = ring + s * kSlotBytes + kABytes;
        wgmma_fence();
#pragma unroll
        for (int ch = 0; ch < kChunks; ++ch) {
#pragma unroll
          for (int kk = 0; kk < kKc / 8; ++kk) {
#pragma unroll
            for (int m = 0; m < kRowMmas; ++m) {
              Mma<kBN>::run(acc[m], desc_rows<kKc>(a + m * 64 * kKc * 4 + ch * Layout::kAChunk + 32 * kk),
                            desc_rows<kKc>(b + ch * Layout::kBChunk + 32 * kk));
            }
          }
        }
        wgmma_commit();
        wgmma_wait<1>();  // the previous k-tile's wgmmas are done: its slot can be refilled
        if (it > 0 && lane == 0) release(prev);
        prev = s;
        if (++s == kStages) {
          s = 0;
          phase ^= 1u;
        }
      }
      wgmma_wait<0>();
      if (iters > 0 && lane == 0) release(prev);  // the tile's last slot, for the next tile's loads
    } else if constexpr (kSplit) {
#pragma unroll 1
      for (int it = 0; it < iters; ++it) {
        mbar_wait(full_bar + 8 * s, phase);
        const uint32_t a = ring + s * kSlotBytes + cw * 64 * kKc * 4;  // the big A half; + kHalf: the small
        const uint32_t b = ring + s * kSlotBytes + kABytes;
        wgmma_fence();
#pragma unroll
        for (int ch = 0; ch < kChunks; ++ch) {
#pragma unroll
          for (int kk = 0; kk < kKc / 8; ++kk) {
            const uint32_t ao = a + ch * Layout::kAChunk + 32 * kk, bo = b + ch * Layout::kBChunk + 32 * kk;
            Mma<kBN>::run(part, desc_rows<kKc>(ao + Layout::kHalf), desc_rows<kKc>(bo), ch + kk > 0 ? 1 : 0);
            Mma<kBN>::run(part, desc_rows<kKc>(ao), desc_rows<kKc>(bo + Layout::kHalf));
          }
        }
#pragma unroll
        for (int ch = 0; ch < kChunks; ++ch) {
#pragma unroll
          for (int kk = 0; kk < kKc / 8; ++kk) {
            Mma<kBN>::run(part, desc_rows<kKc>(a + ch * Layout::kAChunk + 32 * kk),
                          desc_rows<kKc>(b + ch * Layout::kBChunk + 32 * kk));
          }
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_accumulators(part);
        __syncwarp();
        if (lane == 0) mbar_arrive(empty_bar + 8 * s);  // the slot's wgmmas are done: it can be refilled
#pragma unroll
        for (int i = 0; i < kAcc; ++i) acc[0][i] += part[i];
        if (++s == kStages) {
          s = 0;
          phase ^= 1u;
        }
      }
    } else {
      // Byte offsets of this lane's fragment words in the [d][h][c][w] box: rows r and r + 8, channel t.
      auto row_offset = [&](int r) {
        const int pw = r % g.bw, ph = (r / g.bw) % g.bh, pd = r / (g.bw * g.bh);
        return static_cast<uint32_t>((((pd * g.bh + ph) * kBK + tq) * g.bwb + pw) * 4);
      };
      const int r0 = 64 * cw + 16 * q + gq;
      const uint32_t off0 = row_offset(r0), off1 = row_offset(r0 + 8);
      const uint32_t k8_step = static_cast<uint32_t>(8 * g.bwb * 4), k4 = static_cast<uint32_t>(4 * g.bwb * 4);
      // One k-tile per wgmma group, waited for before the next tile's fragments are loaded: ptxas serialises
      // (and on the H100 the kernel died with an illegal instruction) when a non-wgmma instruction defines a
      // wgmma's A registers while earlier wgmmas are in flight. The other warpgroup's wgmmas fill the tensor
      // core while this one loads.
      uint32_t frag[kBK / 8][4];
      const int cblocks = g.cq / kBK;
      TapWalk at;  // the k-tile's channel block and tap column, as the producer walks them
#pragma unroll 1
      for (int it = 0; it < iters; ++it) {
        mbar_wait(full_bar + 8 * s, phase);
        const uint32_t b = ring + s * kSlotBytes + kABytes;
        // the box starts (ow0 + kw * dw - pw) & 3 columns left of this tap's first input column
        const uint32_t a = ring + s * kSlotBytes + static_cast<uint32_t>(((ow0 + at.kw * g.dw - g.pw) & 3) * 4);
        at.advance(g, cblocks);
#pragma unroll
        for (int kk = 0; kk < kBK / 8; ++kk) {
          const uint32_t at = a + kk * k8_step;
          frag[kk][0] = ld_shared(at + off0) + 0x1000u;
          frag[kk][1] = ld_shared(at + off1) + 0x1000u;
          frag[kk][2] = ld_shared(at + off0 + k4) + 0x1000u;
          frag[kk][3] = ld_shared(at + off1 + k4) + 0x1000u;
        }
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 8; ++kk) Mma<kBN>::run(acc[0], frag[kk], desc_sw128(b + 32 * kk));
        wgmma_commit();
        wgmma_wait<0>();
        __syncwarp();
        if (lane == 0) mbar_arrive(empty_bar + 8 * s);
        if (++s == kStages) {
          s = 0;
          phase ^= 1u;
        }
      }
    }
    wgmma_wait<0>();
#pragma unroll
    for (int m = 0; m < kRowMmas; ++m) fence_accumulators(acc[m]);

    if constexpr (kOut == kChannelReduce) {  // one channel tile (k0 = 0): the launch checks K <= kBN
      if (stores) reduce_tile<kBN, kM>(y, g, acc, ow0, u.oh0, u.od0, u.img, tid, epi);
    } else if constexpr (kOut == kStoreStats) {  // then the tile's sums into each channel's unit
      store_tile_stats<kBN, kM>(y, g, acc, u.k0, ow0, u.oh0, u.od0, u.img, tid, epi, stats_s);
      asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory");
      for (int i = tid; i < 2 * kBN; i += kConsumers) {
        const int k = u.k0 + i / 2;
        if (k >= g.k) continue;
        // a unit: the channel (batch norm) or the image's group of K / stat_groups channels (group, instance norm)
        const long long unit =
            stat_groups == 0 ? k : static_cast<long long>(u.img) * stat_groups + k / (g.k / stat_groups);
        atomicAdd(sums + 2 * unit + (i & 1), stats_s[i]);
      }
    } else if (stores) {
      store_tile<kBN, kStaged, kM>(y, g, acc, u.k0, ow0, u.oh0, u.od0, u.img,
                                   reinterpret_cast<float*>(smem_raw + (ring - raw)), tid, epi);
    }
  }
  if constexpr (kCluster > 1) {  // no block leaves while the other may still write into it
    __syncwarp();
    cluster_sync();
  }
}

// ------------------------------------------------------------------------------------------- input
// NC(DHW) fp32 -> N(DHW)Cp, channels zero-padded to cp, values rounded to TF32 (nearest, ties away): a
// 32 x 32 tile transpose through shared memory, 32 x 8 threads.
// 3xTF32 (`small` not null): small[n] gets v - big, the part of each value the TF32 copy left out (exact in fp32).
__global__ void prepare_input_kernel(const float* __restrict__ x, float* __restrict__ out, float* __restrict__ small,
                                     int c, int cp, long long spatial) {
  __shared__ float tile[32][33];
  __shared__ float rest[32][33];
  const long long s0 = static_cast<long long>(blockIdx.x) * 32;
  const int c0 = blockIdx.y * 32;
  const int n = blockIdx.z;
  const float* xn = x + static_cast<long long>(n) * c * spatial;
  float* on = out + static_cast<long long>(n) * cp * spatial;
  for (int i = threadIdx.y; i < 32; i += 8) {
    const int ch = c0 + i;
    const long long sp = s0 + threadIdx.x;
    float v = 0.0f;
    if (ch < c && sp < spatial) v = xn[static_cast<long long>(ch) * spatial + sp];
    const uint32_t bits = (__float_as_uint(v) + 0x1000u) & 0xffffe000u;
    tile[i][threadIdx.x] = __uint_as_float(bits);
    if (small != nullptr) rest[i][threadIdx.x] = v - __uint_as_float(bits);
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += 8) {
    const long long sp = s0 + i;
    const int ch = c0 + threadIdx.x;
    if (sp < spatial && ch < cp) {
      on[sp * cp + ch] = tile[threadIdx.x][i];
      if (small != nullptr) small[static_cast<long long>(n) * cp * spatial + sp * cp + ch] = rest[threadIdx.x][i];
    }
  }
}

// ------------------------------------------------------------------------------------------- host
using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                            const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                            CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline Encode encoder() {
  static Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      fn = nullptr;
    }
    return reinterpret_cast<Encode>(fn);
  }();
  return encode;
}

// 0 on success; otherwise a code the caller reports: 1001 no driver entry point, 1002 x's map, 1003 w's map,
// 1004 a geometry this kernel does not take. kNchw: x is the model's NC(D)HW tensor (W % 4 == 0), else the
// channels-last copy of prepare_input (3xTF32: both halves, 2N images) and w_re the re-laid weight (3xTF32: 2K rows).
// kKc, kChunks: a k-tile's chunks of channels (see "Chunks" above the kernel).
template <bool kNchw, int kBN, int kStages, int kMinBlocks, bool kStaged, int kKc = kBK, int kChunks = 1,
          bool kSplit = false, bool kPersistent = kSplit, int kM = kBM, int kCluster = 1, int kOut = kStore,
          class Epilogue>
int launch(const float* x, const float* w_re, float* y, const Geometry& given, Epilogue epi, cudaStream_t stream,
           const Parities* parities = nullptr, double* sums = nullptr, int stat_groups = 0) {
  Geometry g = given;
  if (g.fd == 0) {  // the launch writes its own output grid
    g.fd = g.od;
    g.fh = g.oh;
    g.fw = g.ow;
  }
  Parities par;
  if (parities != nullptr) {
    par = *parities;
  } else {  // an ordinary convolution: one class, the geometry's own
    par.n = 1;
    par.c[0] = Parity{g.kd, g.kh, g.kw, g.pd, g.ph, g.pw, g.od, g.oh, g.ow, 0, 0, 0, 0};
  }
  if (par.n < 1 || par.n > kMaxParities) return 1004;
  Encode encode = encoder();
  if (encode == nullptr) return 1001;
  using Layout = Slot<kNchw, kBN, kKc, kChunks, kSplit, kM>;
  if (kOut == kChannelReduce && g.k > kBN) return 1004;  // a reduction over the channels: one tile holds them all
  if (kOut == kStoreStats) {  // the units' sums, zeroed: K units (batch norm) or N x stat_groups (group norm)
    if (sums == nullptr || stat_groups < 0 || (stat_groups > 0 && g.k % stat_groups != 0)) return 1004;
    const long long units = stat_groups == 0 ? g.k : static_cast<long long>(g.n) * stat_groups;
    const cudaError_t zeroed = cudaMemsetAsync(sums, 0, sizeof(double) * 2 * static_cast<size_t>(units), stream);
    if (zeroed != cudaSuccess) return static_cast<int>(zeroed);
  }
  if (g.bd * g.bh * g.bw != kM || g.cq % kKc != 0 || g.cq < g.c) return 1004;
  for (int i = 0; i < par.n; ++i)  // every class's k loop is whole k-tiles
    if (par.c[i].kd * par.c[i].kh * par.c[i].kw * (g.cq / kKc) % kChunks != 0) return 1004;
  if (kNchw ? (g.w % 4 != 0 || g.bw % 4 != 0 || g.bwb < g.bw + 3 || g.bwb * 4 % 16 != 0 ||
               g.bwb * kBK * g.bh * g.bd * 4 > Layout::kABytes)
            : g.cp % 4 != 0)
    return 1004;
  CUtensorMap xmap, wmap;
  constexpr CUtensorMapSwizzle kSwizzle = kKc == 32 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_32B;
  const cuuint32_t unit[5] = {1, 1, 1, 1, 1};
  if (kNchw) {
    const cuuint64_t dims[5] = {static_cast<cuuint64_t>(g.w), static_cast<cuuint64_t>(g.c),
                                static_cast<cuuint64_t>(g.h), static_cast<cuuint64_t>(g.d),
                                static_cast<cuuint64_t>(g.n)};
    const cuuint64_t row = static_cast<cuuint64_t>(g.w) * 4, plane = row * g.h, volume = plane * g.d;
    const cuuint64_t strides[4] = {volume, row, plane, volume * g.c};
    const cuuint32_t box[5] = {static_cast<cuuint32_t>(g.bwb), static_cast<cuuint32_t>(kBK),
                               static_cast<cuuint32_t>(g.bh), static_cast<cuuint32_t>(g.bd), 1};
    if (encode(&xmap, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 5, const_cast<float*>(x), dims, strides, box, unit,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
      return 1002;
  } else {
    const cuuint64_t dims[5] = {static_cast<cuuint64_t>(g.cp), static_cast<cuuint64_t>(g.w),
                                static_cast<cuuint64_t>(g.h), static_cast<cuuint64_t>(g.d),
                                static_cast<cuuint64_t>(g.n) * (kSplit ? 2 : 1)};
    const cuuint64_t row = static_cast<cuuint64_t>(g.cp) * 4;
    const cuuint64_t strides[4] = {row, row * g.w, row * g.w * g.h, row * g.w * g.h * g.d};
    const cuuint32_t box[5] = {static_cast<cuuint32_t>(kKc), static_cast<cuuint32_t>(g.bw),
                               static_cast<cuuint32_t>(g.bh), static_cast<cuuint32_t>(g.bd), 1};
    if (encode(&xmap, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 5, const_cast<float*>(x), dims, strides, box, unit,
               CU_TENSOR_MAP_INTERLEAVE_NONE, kSwizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
      return 1002;
  }
  {
    const int taps = g.kd * g.kh * g.kw;
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(taps) * g.cq, static_cast<cuuint64_t>(g.k) * (kSplit ? 2 : 1)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(taps) * g.cq * 4};
    const cuuint32_t box[2] = {static_cast<cuuint32_t>(kKc), static_cast<cuuint32_t>(kBN / kCluster)};
    if (encode(&wmap, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float*>(w_re), dims, strides, box, unit,
               CU_TENSOR_MAP_INTERLEAVE_NONE, kSwizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
      return 1003;
  }
  const int smem = kStages * Layout::kBytes + 1024 + 16 * kStages;
  static_assert(kStages * (Layout::kBytes + 16) + 1024 + (kOut == kStoreStats ? 16 * kBN : 8) <= 232448,
                "the ring, its barriers and the statistics' sums fit an SM's 227 KB of shared memory");
  static_assert(!kStaged || kBN * (kBM + 4) * 4 <= kStages * Layout::kBytes, "staging tile fits the ring");
  auto kernel = conv_igemm_kernel<kNchw, kBN, kStages, kMinBlocks, kStaged, Epilogue, kKc, kChunks, kSplit,
                                   kPersistent, kM, kCluster, kOut>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return static_cast<int>(err);
  const Parity& big = par.c[0];
  const long long tiles = static_cast<long long>((g.k + kBN - 1) / kBN) * par.n * ((big.ow + g.bw - 1) / g.bw) *
                          ((big.oh + g.bh - 1) / g.bh) * ((big.od + g.bd - 1) / g.bd) * g.n;
  if (tiles <= 0 || tiles > 0x7fffffffLL) return 1004;
  long long grid = tiles;
  if constexpr (kCluster > 1) {  // clusters of kCluster blocks, each cluster kCluster boxes of one channel tile
    if (par.n != 1) return 1004;  // the blocks of a cluster share their weight tiles: one class, the same taps
    const long long k_tiles = (g.k + kBN - 1) / kBN, boxes = tiles / k_tiles;
    grid = kCluster * k_tiles * ((boxes + kCluster - 1) / kCluster);
    if (grid > 0x7fffffffLL) return 1004;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(static_cast<unsigned>(grid));
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = static_cast<size_t>(smem);
    config.stream = stream;
    cudaLaunchAttribute cluster[1];
    cluster[0].id = cudaLaunchAttributeClusterDimension;
    cluster[0].val.clusterDim.x = kCluster;
    cluster[0].val.clusterDim.y = 1;
    cluster[0].val.clusterDim.z = 1;
    config.attrs = cluster;
    config.numAttrs = 1;
    return static_cast<int>(cudaLaunchKernelEx(&config, kernel, y, g, par, xmap, wmap, epi, sums, stat_groups));
  }
  if constexpr (kPersistent) {  // as many blocks as fit on the GPU at once, each a run of tiles
    // the blocks resident per device, found on its first launch (this instance's shared memory is a constant)
    static int resident_on[kMaxDevices] = {};
    int device = 0;
    err = cudaGetDevice(&device);
    if (err != cudaSuccess) return static_cast<int>(err);
    int resident = device < kMaxDevices ? resident_on[device] : 0;
    if (resident == 0) {
      int sms = 0, per_sm = 0;
      err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
      if (err == cudaSuccess) err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem);
      if (err != cudaSuccess) return static_cast<int>(err);
      resident = sms * per_sm > 0 ? sms * per_sm : 1;
      if (device < kMaxDevices) resident_on[device] = resident;
    }
    grid = tiles < resident ? tiles : resident;
  }
  kernel<<<static_cast<unsigned>(grid), kThreads, smem, stream>>>(y, g, par, xmap, wmap, epi, sums, stat_groups);
  return static_cast<int>(cudaGetLastError());
}


// The channels-last, TF32-rounded copy of an NC(DHW) input (`spatial` = D * H * W values a channel) that the
// channels-last path reads: 0 on success, else the CUDA error (1004: a batch past the grid's z limit). split (3xTF32):
// `out` holds 2n images, the small parts after the big ones.
inline int prepare_input(const float* x, float* out, int n, int c, int cp, long long spatial, cudaStream_t stream,
                         bool split = false) {
  if (n > 65535 || spatial <= 0) return 1004;
  const dim3 grid(static_cast<unsigned>((spatial + 31) / 32), static_cast<unsigned>((cp + 31) / 32),
                  static_cast<unsigned>(n));
  float* small = split ? out + static_cast<long long>(n) * cp * spatial : nullptr;
  prepare_input_kernel<<<grid, dim3(32, 8), 0, stream>>>(x, out, small, c, cp, spatial);
  return static_cast<int>(cudaGetLastError());
}

// ------------------------------------------------------------------------------------------- transposed
// One axis of one output parity class r of a transposed convolution of window k, stride s, padding p over an output
// of `out` pixels: its first tap t0 and its taps' count, the padding of the class's ordinary convolution, and its
// output pixels (r, r + s, ...).
struct AxisClass {
  int t0, taps, pad, extent;
};

__host__ __device__ inline AxisClass axis_class(int k, int s, int p, int out, int r) {
  AxisClass a;
  a.t0 = (r + p) % s;
  a.taps = a.t0 < k ? (k - a.t0 + s - 1) / s : 0;
  a.pad = a.taps - 1 - (r + p - a.t0) / s;
  a.extent = out > r ? (out - r + s - 1) / s : 0;
  return a;
}

// The weight [C, K, KD, KH, KW] of a transposed convolution -> [K][taps][cq]: the taps grouped by parity class
// (rd, rh, rw; class index (rd sh + rh) sw + rw), a class's taps in reverse (u = J - 1 - j) from its first tap, channels
// zero-padded to cq, TF32-rounded as ff_conv_igemm_weight rounds. A thread per (k, tap, channel < cq).
struct TransposedWeight {
  int c, k, cq;
  int split;  // 3xTF32: rows k + K get the small parts (v - big)
  int kd, kh, kw, sd, sh, sw, pd, ph, pw;
};

// The taps of parity class (rd, rh, rw) and of the classes before it.
__host__ __device__ inline int class_taps(const TransposedWeight& t, int rd, int rh, int rw) {
  return axis_class(t.kd, t.sd, t.pd, 1, rd).taps * axis_class(t.kh, t.sh, t.ph, 1, rh).taps *
         axis_class(t.kw, t.sw, t.pw, 1, rw).taps;
}
__host__ __device__ inline int first_tap(const TransposedWeight& t, int cls) {
  int first = 0;
  for (int b = 0; b < cls; ++b) first += class_taps(t, b / (t.sh * t.sw), (b / t.sw) % t.sh, b % t.sw);
  return first;
}

__global__ void transposed_weight_kernel(const float* __restrict__ w, float* __restrict__ out, TransposedWeight t) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int taps = t.kd * t.kh * t.kw;
  if (i >= static_cast<long long>(t.k) * taps * t.cq) return;
  const int ch = static_cast<int>(i % t.cq);
  const int tap = static_cast<int>((i / t.cq) % taps);
  const int k = static_cast<int>(i / (static_cast<long long>(t.cq) * taps));
  const int td = tap / (t.kh * t.kw), th = (tap / t.kw) % t.kh, tw = tap % t.kw;
  // the tap's class per axis: the r with (r + p - tap) = 0 mod s
  const int rd = ((td - t.pd) % t.sd + t.sd) % t.sd, rh = ((th - t.ph) % t.sh + t.sh) % t.sh,
            rw = ((tw - t.pw) % t.sw + t.sw) % t.sw;
  const AxisClass ad = axis_class(t.kd, t.sd, t.pd, 1, rd), ah = axis_class(t.kh, t.sh, t.ph, 1, rh),
                  aw = axis_class(t.kw, t.sw, t.pw, 1, rw);
  const int ud = ad.taps - 1 - (td - ad.t0) / t.sd, uh = ah.taps - 1 - (th - ah.t0) / t.sh,
            uw = aw.taps - 1 - (tw - aw.t0) / t.sw;
  const int row = first_tap(t, (rd * t.sh + rh) * t.sw + rw) + (ud * ah.taps + uh) * aw.taps + uw;
  float v = 0.0f;
  if (ch < t.c) v = w[((static_cast<long long>(ch) * t.k + k) * t.kd + td) * t.kh * t.kw + th * t.kw + tw];
  const uint32_t bits = (__float_as_uint(v) + 0x1000u) & 0xffffe000u;
  out[(static_cast<long long>(k) * taps + row) * t.cq + ch] = __uint_as_float(bits);
  if (t.split) out[(static_cast<long long>(k + t.k) * taps + row) * t.cq + ch] = v - __uint_as_float(bits);
}

// A transposed convolution: `g` has the whole window, padding and output (od, oh, ow), and the strides in sd, sh, sw
// (dilation 1); `w` is the model's weight [C, K, window], `w_re` a scratch of K x taps x cq floats (3xTF32: twice
// that). Re-lays the weight, then one launch computes every output parity class with a non-empty output (`Parities`).
// 0 on success, else launch's codes.
template <bool kNchw, int kBN, int kStages, int kMinBlocks, bool kStaged, int kKc = kBK, int kChunks = 1,
          bool kSplit = false, bool kPersistent = kSplit, int kM = kBM, int kCluster = 1, int kOut = kStore,
          class Epilogue>
int launch_transposed(const float* x, const float* w, float* w_re, float* y, const Geometry& g, Epilogue epi,
                      cudaStream_t stream, double* sums = nullptr, int stat_groups = 0) {
  if (g.dd != 1 || g.dh != 1 || g.dw != 1 || g.kd < g.sd || g.kh < g.sh || g.kw < g.sw ||
      g.sd * g.sh * g.sw > kMaxParities)
    return 1004;
  const TransposedWeight t{g.c, g.k, g.cq, kSplit ? 1 : 0, g.kd, g.kh, g.kw, g.sd, g.sh, g.sw, g.pd, g.ph, g.pw};
  const long long values = static_cast<long long>(g.k) * g.kd * g.kh * g.kw * g.cq;
  transposed_weight_kernel<<<static_cast<unsigned>((values + 255) / 256), 256, 0, stream>>>(w, w_re, t);
  const int code = static_cast<int>(cudaGetLastError());
  if (code != 0) return code;
  Parities par;
  par.n = 0;
  for (int cls = 0; cls < g.sd * g.sh * g.sw; ++cls) {
    const int rd = cls / (g.sh * g.sw), rh = (cls / g.sw) % g.sh, rw = cls % g.sw;
    const AxisClass ad = axis_class(g.kd, g.sd, g.pd, g.od, rd), ah = axis_class(g.kh, g.sh, g.ph, g.oh, rh),
                    aw = axis_class(g.kw, g.sw, g.pw, g.ow, rw);
    if (ad.extent > 0 && ah.extent > 0 && aw.extent > 0)
      par.c[par.n++] = Parity{ad.taps, ah.taps, aw.taps, ad.pad, ah.pad, aw.pad, ad.extent, ah.extent, aw.extent,
                              rd, rh, rw, first_tap(t, cls)};
  }
  Geometry whole = g;
  whole.fd = g.od, whole.fh = g.oh, whole.fw = g.ow;
  return launch<kNchw, kBN, kStages, kMinBlocks, kStaged, kKc, kChunks, kSplit, kPersistent, kM, kCluster, kOut>(
      x, w_re, y, whole, epi, stream, &par, sums, stat_groups);
}

}  // namespace ff_conv_igemm
