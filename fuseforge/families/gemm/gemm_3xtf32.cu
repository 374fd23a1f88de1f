// gemm_3xtf32.cu -- fp32-class GEMM on tensor cores with 3xTF32 (issue #5). Only CUDA headers.
// Three kernels behind the same launchers, chosen by gemm3x_set_variant: 0 (default) mma.sync m16n8k8 TF32
// with a cp.async shared-memory pipeline; 1 (sm_90a) wgmma; 2 (sm_90a) warp-specialised
// wgmma with A from registers; 1 and 2 are described above their kernels.
//
// Math. Each fp32 operand value x is split into two TF32 values (10 explicit mantissa bits each), so that
// big + small reproduces x to 2^-21 relative with an error of either sign (unbiased). The tensor core reads
// a .tf32 operand from a 32-bit word by dropping its low 13 bits (truncation), which the split uses:
//   A (and both operands of variants 0/1): big = rna_tf32(x) ((bits + 0x1000) & 0xffffe000, round to
//       nearest), small = x - big left in fp32 (exact; |small| <= half a TF32 ulp of x, either sign, so
//       the tensor core's truncation of it errs either way);
//   variant 2's B: big = the fp32 tile itself (the tensor core truncates it: no instruction, no store),
//       small = rna_tf32(x - trunc(x)) (x - trunc(x) has x's sign; rounding it to nearest errs either way).
// Truncating both parts instead (fewer instructions) biases every value toward zero: on the headline shape
// 6.3e-7 vs 3.8e-7 (SGEMM 1.6e-6) but 10x eager's error on short K (K = 1-65 after an exp epilogue), which
// DESIGN's verification rule rejects. Products
//     a_small*b_big + a_big*b_small + a_big*b_big           (small*small dropped)
// are accumulated on the tensor core in fp32 -- but only over a few k-tiles at a time:
//
// Accumulation. The tensor core's fp32 accumulation is not IEEE round-to-nearest. The first H100 run
// (one accumulator chained through all K/8 * 3 mmas) had errors vs fp64 growing linearly in K: 3.1e-7 at
// K=33, 7.0e-6 at K=999, 2.9e-5 at K=4096, 5.7e-5 at K=8192 (cuBLAS SGEMM 1.6e-6). A model in which each
// mma adds its 8 exact products to the accumulator after aligning all 9 terms to the largest and
// truncating 2 bits below fp32's 24, then rounds the sum toward zero, reproduces those numbers within a
// few percent (tests/test_dev_kernels_compile.py): the rounding toward zero shrinks the running sum a
// little at every step. So a few k-tiles go into a fresh accumulator (the first mma reads zeros) that is
// then added into the running sum with an ordinary fp32 add (round to nearest): variants 0 and 1 one k-tile
// (BK = 32: 4 k-steps x 3 mmas), variant 2 kWsTilesPerFlush (2) k-tiles, 64 FADDs per thread per flush.
// The rounding toward zero is a bias: the mean over the rows of C keeps it (train-mode BatchNorm's batch
// mean after a Linear layer, which verification compares), while each element's random error averages out.
// Each wgmma shrinks the chain's running sum, so variant 2 orders a flush's 24 wgmmas to keep that sum
// small for as many as possible: the 16 small-part products of both k-tiles first (they add ~2^-11 of the
// result), then the 8 big ones. H100, 1024x8192x8192, error of the column means in units of cuBLAS
// SGEMM's: 3.75x for one k-tile per flush in k-step order, 7.55x for two (which failed verification on
// gemm_scale_batchnorm's running mean), 2.74x for two with the small products first (element error 2.9e-7
// vs SGEMM's 1.6e-6). The model gives these within ~10% (tests/test_dev_kernels_compile.py).
//
// Layouts (all row-major, leading dimensions in elements):
//   TN: C[M,N] = A[M,K] . B[N,K]^T   (x @ W.T, W as nn.Linear stores it)   B tile in smem as [n][k]
//   NN: C[M,N] = A[M,K] . B[K,N]                                          B tile in smem as [k][n]
//   Batched: blockIdx.z picks the batch (variant 2: the output tile's number); A, B, C (and the epilogue's
//   residual) advance by their strides.
//
// Tiling (variant 0). Block tile BM x BN x BK = 128 x 128 x 32, 256 threads = 8 warps arranged 2 (m) x 4 (n);
// each warp owns a 64 x 32 sub-tile = 4 (m16) x 4 (n8) mma tiles = 64 fp32 accumulators per thread.
// Shared memory per stage: A [128][32+4] floats, B [128][32+4] (TN) or [32][128+8] (NN); the padding
// makes every fragment read below bank-conflict free and keeps each smem row 16-byte aligned.
// 3 stages = 108 KB of dynamic shared memory (launcher raises the limit with cudaFuncSetAttribute).
// __launch_bounds__(256, 1): ptxas needs ~220-253 registers (64 accumulators, 64 for the k-tile's fresh
// accumulator, split fragments), so one block (8 warps) per SM. Spare smem allows 4-5 stages.
// Fragments of A (and of B in TN) are read with ldmatrix.x4 (fp32 as pairs of b16; see ldsm_x4); NN's B
// ([k][n] in smem) is read with scalar loads, since ldmatrix cannot transpose 32-bit elements.
//
// Fragment layouts of mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (PTX ISA, "Matrix Fragments
// for mma.m16n8k8", .tf32). lane = threadIdx.x % 32, g = lane >> 2 (groupID), t = lane & 3
// (threadID_in_group):
//   A (16 x 8, row-major, 4 x .b32 per thread):
//       a0 = A[g    ][t    ]   a1 = A[g + 8][t    ]   a2 = A[g    ][t + 4]   a3 = A[g + 8][t + 4]
//   B (8 x 8, "col" i.e. indexed [k][n], 2 x .b32 per thread):
//       b0 = B[k = t    ][n = g]                      b1 = B[k = t + 4][n = g]
//   C/D (16 x 8, 4 x .f32 per thread):
//       c0 = C[g][2t]   c1 = C[g][2t + 1]   c2 = C[g + 8][2t]   c3 = C[g + 8][2t + 1]
// Bank check (32 banks x 4 B): A smem stride 36 -> word g*36 + t -> bank (4g + t) % 32, 32 distinct;
// TN B the same; NN B stride 136 -> word t*136 + g -> bank (8t + g) % 32, 32 distinct.
//
// Ragged shapes. Every cp.async is bounds-checked: out-of-range rows copy 0 source bytes, a chunk that
// straddles the K (or N) edge copies only its valid bytes, and cp.async zero-fills the rest of the
// destination. Zeros contribute nothing to the dot products, so no masking is needed in the main loop.
// The 16-byte path (kVec = 4) needs 16-byte aligned A/B base pointers and lda, ldb multiples of 4;
// otherwise the launcher falls back to 4-byte copies (kVec = 1). Stores check row < M and col < N.
//
// Epilogue hook: a functor template parameter, called per output element as
//     float epi(float acc, int batch, int row, int col)
// with Identity, Bias, and BiasSigmoidScaleResidual (C = sigmoid(acc + bias[col]) * scale + R[row,col])
// as examples.
//
// Variants 0 and 1 ran correctly on an H100 (bench/results/2026-11-21_labs_h100_634af62: 57.3 and 75.7
// TFLOP/s on 1024x8192x8192, error 3.8e-7 vs SGEMM's 1.6e-6); variant 2 ran at 135.8 TFLOP/s, error 2.9e-7
// (bench/results/2026-11-22_gemm_tma_h100_118831e). This file
// compiles for sm_90a (tests/test_dev_kernels_compile.py); correctness and speed are checked by
// dev/kernels/bench_gemm.py in a GPU session.

#include <cuda.h>  // CUtensorMap (variant 2's TMA loads; encoded through the runtime's driver entry point)
#include <cuda_runtime.h>
#include <stdint.h>

namespace gemm3x {

constexpr int kBM = 128;
constexpr int kBN = 128;
constexpr int kBK = 32;
#ifndef GEMM3X_STAGES
#define GEMM3X_STAGES 3  // tuning knob: bench_gemm.py --stages N rebuilds with -DGEMM3X_STAGES=N
#endif
constexpr int kStages = GEMM3X_STAGES;
constexpr int kThreads = 256;
constexpr int kWarpsM = 2;
constexpr int kWarpsN = 4;
constexpr int kWarpM = kBM / kWarpsM;  // 64
constexpr int kWarpN = kBN / kWarpsN;  // 32
constexpr int kMmaM = kWarpM / 16;     // 4 m16 tiles per warp
constexpr int kMmaN = kWarpN / 8;      // 4 n8 tiles per warp
constexpr int kLdsK = kBK + 4;         // smem row stride of [row][k] tiles (A, TN B)
constexpr int kLdsN = kBN + 8;         // smem row stride of the [k][n] tile (NN B)

static_assert(kWarpsM * kWarpsN * 32 == kThreads, "8 warps");
static_assert(kBK % 8 == 0, "BK is a multiple of the mma k (8)");
static_assert(kStages >= 2, "at least double buffering");

// ---------------------------------------------------------------------------------------------------
// Epilogues
// ---------------------------------------------------------------------------------------------------
struct Identity {
  __device__ __forceinline__ float operator()(float acc, int, int, int) const { return acc; }
};

struct Bias {
  const float* bias;  // [N]
  __device__ __forceinline__ float operator()(float acc, int, int, int col) const {
    return acc + bias[col];
  }
};

struct BiasSigmoidScaleResidual {
  const float* bias;      // [N]
  float scale;
  const float* residual;  // [batch][M][ldr], batch stride stride_r
  int ldr;
  long long stride_r;
  __device__ __forceinline__ float operator()(float acc, int batch, int row, int col) const {
    const float z = acc + bias[col];
    const float s = 1.0f / (1.0f + expf(-z));
    return s * scale + residual[batch * stride_r + static_cast<long long>(row) * ldr + col];
  }
};

// ---------------------------------------------------------------------------------------------------
// PTX wrappers
// ---------------------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies src_bytes (0..cp-size) from global and zero-fills the rest of the cp-size destination bytes.
template <int kVec>
__device__ __forceinline__ void cp_async(uint32_t dst, const float* src, int src_bytes) {
  if constexpr (kVec == 4) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
  }
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// fp32 -> TF32 with round-to-nearest, ties away from zero, in integer arithmetic: add half of the dropped
// 13 bits to the magnitude, then clear them (what ptxas emits for cvt.rna.tf32.f32 on sm_90, less its
// Inf/NaN select: this form maps Inf to Inf and NaN to NaN anyway).
__device__ __forceinline__ uint32_t to_tf32(float x) {
  return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
}

// x -> (big, small): big = rna_tf32(x), small = x - big exact in fp32 (the tensor core truncates it when it
// reads it): big + tf32(small) = x to 2^-21 relative, either sign. Inf/NaN: small = NaN (product NaN).
__device__ __forceinline__ void split_tf32(float x, uint32_t& big, uint32_t& small) {
  big = to_tf32(x);
  small = __float_as_uint(x - __uint_as_float(big));
}

// ldmatrix of four 8x8 b16 matrices = four 8-row x 4-column fp32 blocks. Lanes 8i..8i+7 give the
// row addresses (16 contiguous bytes each) of block i; lane l receives row l/4, column l%4 of each
// block in r[i], which is exactly the TF32 A fragment a_i (and B fragment b0/b1) layout of m16n8k8.
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ---------------------------------------------------------------------------------------------------
// Global -> shared tile copy. The tile is kRows x kCols floats, kCols contiguous in both global
// memory (leading dimension ld) and shared memory (row stride kLds). (row0, col0) is the tile origin
// in global memory; rows >= row_end and columns >= col_end are zero-filled.
// ---------------------------------------------------------------------------------------------------
template <int kRows, int kCols, int kLds, int kVec>
__device__ __forceinline__ void load_tile(float* smem, const float* gmem, int ld, int row0, int col0,
                                          int row_end, int col_end) {
  constexpr int kChunksPerRow = kCols / kVec;
  constexpr int kChunks = kRows * kChunksPerRow;
  static_assert(kChunks % kThreads == 0, "whole chunks per thread");
#pragma unroll
  for (int i = 0; i < kChunks / kThreads; ++i) {
    const int chunk = i * kThreads + static_cast<int>(threadIdx.x);
    const int r = chunk / kChunksPerRow;
    const int c = (chunk % kChunksPerRow) * kVec;
    const int grow = row0 + r;
    const int gcol = col0 + c;
    int valid = col_end - gcol;
    valid = valid < 0 ? 0 : (valid > kVec ? kVec : valid);
    if (grow >= row_end) valid = 0;
    // A chunk with no valid bytes still gets a legal address (the tile base) to read 0 bytes from.
    const float* src = valid > 0 ? gmem + static_cast<long long>(grow) * ld + gcol : gmem;
    cp_async<kVec>(smem_addr(smem + r * kLds + c), src, valid * 4);
  }
}

template <bool kBKMajor>
struct Smem {
  static constexpr int kA = kBM * kLdsK;                       // floats per stage
  static constexpr int kB = kBKMajor ? kBN * kLdsK : kBK * kLdsN;
  static constexpr int kStage = kA + kB;
  static constexpr int kBytes = kStages * kStage * static_cast<int>(sizeof(float));
};

// ---------------------------------------------------------------------------------------------------
// The kernel. kBKMajor: B is [N][K] (TN, as nn.Linear's weight); otherwise B is [K][N] (NN).
// ---------------------------------------------------------------------------------------------------
template <bool kBKMajor, int kVec, class Epilogue>
__global__ void __launch_bounds__(kThreads, 1)
    gemm3x_tf32_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                       int M, int N, int K, int lda, int ldb, int ldc, long long stride_a,
                       long long stride_b, long long stride_c, Epilogue epi) {
  using S = Smem<kBKMajor>;
  extern __shared__ __align__(16) float smem[];

  const int batch = static_cast<int>(blockIdx.z);
  A += batch * stride_a;
  B += batch * stride_b;
  C += batch * stride_c;

  // m varies fastest across blocks: consecutive blocks share one B (weight) tile through L2.
  const int m0 = static_cast<int>(blockIdx.x) * kBM;
  const int n0 = static_cast<int>(blockIdx.y) * kBN;

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane >> 2;  // groupID
  const int t = lane & 3;   // threadID_in_group
  const int wm = (warp % kWarpsM) * kWarpM;
  const int wn = (warp / kWarpsM) * kWarpN;

  float acc[kMmaM][kMmaN][4];
#pragma unroll
  for (int mi = 0; mi < kMmaM; ++mi)
#pragma unroll
    for (int ni = 0; ni < kMmaN; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0f;

  const int k_tiles = (K + kBK - 1) / kBK;

  auto load_stage = [&](int stage, int kt) {
    float* sa = smem + stage * S::kStage;
    float* sb = sa + S::kA;
    const int k0 = kt * kBK;
    load_tile<kBM, kBK, kLdsK, kVec>(sa, A, lda, m0, k0, M, K);
    if constexpr (kBKMajor) {
      load_tile<kBN, kBK, kLdsK, kVec>(sb, B, ldb, n0, k0, N, K);
    } else {
      load_tile<kBK, kBN, kLdsN, kVec>(sb, B, ldb, k0, n0, K, N);
    }
  };

  // Prologue: stages 0 .. kStages-2 in flight. One commit per stage, empty or not, so that
  // wait_group<kStages-2> below always means "the stage about to be read has landed".
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }

  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kStages - 2>();
    // Makes stage kt visible to all threads, and guarantees every warp finished reading stage
    // (kt - 1) % kStages, which the load below overwrites.
    __syncthreads();
    {
      const int next = kt + kStages - 1;
      if (next < k_tiles) load_stage(next % kStages, next);
      cp_async_commit();
    }

    const float* sa = smem + (kt % kStages) * S::kStage;
    const float* sb = sa + S::kA;

    // This k-tile's products go into a fresh accumulator (the first mma of each tile reads zeros),
    // which is then added into acc with an ordinary fp32 add (round to nearest). The tensor core's own
    // fp32 accumulation rounds toward zero (see the header): chaining all K/8 * 3 mmas into one
    // accumulator shrank every result by ~K * 7e-9 relative (5.7e-5 at K = 8192 on the H100).
    float tile[kMmaM][kMmaN][4];
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi)
#pragma unroll
      for (int ni = 0; ni < kMmaN; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) tile[mi][ni][e] = 0.0f;

#pragma unroll
    for (int kk = 0; kk < kBK; kk += 8) {
      // B fragments for the warp's 4 n8 tiles, split into big/small.
      uint32_t b_big[kMmaN][2];
      uint32_t b_small[kMmaN][2];
#pragma unroll
      for (int ni = 0; ni < kMmaN; ni += 2) {
        uint32_t raw[2][2];
        if constexpr (kBKMajor) {
          // Blocks: (ni, k 0-3), (ni, k 4-7), (ni+1, k 0-3), (ni+1, k 4-7).
          const int n = wn + ni * 8 + (lane & 7) + (lane >> 4) * 8;
          ldsm_x4(smem_addr(sb + n * kLdsK + kk + ((lane >> 3) & 1) * 4), raw[0][0], raw[0][1], raw[1][0],
                  raw[1][1]);
        } else {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int n = wn + (ni + j) * 8 + g;
            raw[j][0] = __float_as_uint(sb[(kk + t) * kLdsN + n]);
            raw[j][1] = __float_as_uint(sb[(kk + t + 4) * kLdsN + n]);
          }
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          split_tf32(__uint_as_float(raw[j][0]), b_big[ni + j][0], b_small[ni + j][0]);
          split_tf32(__uint_as_float(raw[j][1]), b_big[ni + j][1], b_small[ni + j][1]);
        }
      }
      // One m16 tile of A at a time keeps the live fragment registers low (8 for A, 16 for B).
#pragma unroll
      for (int mi = 0; mi < kMmaM; ++mi) {
        // Blocks: (rows 0-7, k 0-3), (rows 8-15, k 0-3), (rows 0-7, k 4-7), (rows 8-15, k 4-7).
        const int row = wm + mi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        uint32_t a[4];
        ldsm_x4(smem_addr(sa + row * kLdsK + kk + (lane >> 4) * 4), a[0], a[1], a[2], a[3]);
        uint32_t a_big[4];
        uint32_t a_small[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) split_tf32(__uint_as_float(a[e]), a_big[e], a_small[e]);
#pragma unroll
        for (int ni = 0; ni < kMmaN; ++ni) {
          mma_tf32(tile[mi][ni], a_small, b_big[ni]);
          mma_tf32(tile[mi][ni], a_big, b_small[ni]);
          mma_tf32(tile[mi][ni], a_big, b_big[ni]);
        }
      }
    }
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi)
#pragma unroll
      for (int ni = 0; ni < kMmaN; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][ni][e] += tile[mi][ni][e];
  }
  cp_async_wait<0>();

  // Epilogue straight from the accumulators (C fragment layout above), bounds-checked.
#pragma unroll
  for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
    for (int ni = 0; ni < kMmaN; ++ni) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = m0 + wm + mi * 16 + g + (e >> 1) * 8;
        const int col = n0 + wn + ni * 8 + 2 * t + (e & 1);
        if (row < M && col < N) {
          C[static_cast<long long>(row) * ldc + col] = epi(acc[mi][ni][e], batch, row, col);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Variant 1 (sm_90a): warpgroup MMA (wgmma) -- ran correctly on an H100 (75.7 TFLOP/s headline), gemm3x_set_variant(1).
//
// Block tile 128 x 128 x 32, 256 threads = 2 warpgroups; warpgroup w computes rows 64w .. 64w+63 with
// wgmma.mma_async.m64n128k8.f32.tf32.tf32 (both operands from shared memory; TF32 wgmma needs both
// K-major). Per k-tile:
//   1. cp.async brings the fp32 tiles into unpadded staging buffers (kWgStages deep; same bounds-checked
//      zero-filling loader as variant 0; A [128][32], TN B [128][32], NN B [32][128]).
//   2. All 256 threads split the staged tile once (not once per warp as in variant 0) into four TF32
//      tiles A_big, A_small, B_big, B_small, each [128 rows][32 k] K-major in the 128-byte-swizzle layout
//      (row r at r*128 bytes, 16-byte chunk c stored at chunk c ^ (r % 8); 1024-byte aligned atoms of 8
//      rows). NN's B is transposed to [n][k] on the way. Split buffers are double-buffered, so the split
//      of tile kt+1 runs while the wgmmas of tile kt are in flight.
//   3. Each warpgroup issues 4 k8-steps x 3 wgmmas (a_small.b_big, a_big.b_small, a_big.b_big) into a
//      fresh accumulator (the first with scale-d = 0), waits, and adds it into the running fp32
//      accumulator with round-to-nearest adds (the same per-tile flush as variant 0).
// Descriptors (PTX ISA "Matrix Descriptor Format"): bits 0-13 start address >> 4, 16-29 leading byte
// offset >> 4 (unused for swizzled K-major; 1), 32-45 stride byte offset >> 4 (1024: between 8-row
// groups), 62-63 layout (1 = 128-byte swizzle). The k8 step inside the 128-byte row advances the start
// address by 32 bytes (as CUTLASS / DeepGEMM do for K-major SW128).
// Accumulator fragment (m64nN, f32): warp q of the warpgroup owns rows 16q .. 16q+15; d[4j + e] is
// (row 16q + g + 8*(e>>1), col 8j + 2t + (e&1)) for j < N/8, i.e. m16n8's C layout repeated along n.
// Shared memory: 3 x 32 KB staging + 2 x 64 KB split buffers + 1 KB alignment slack = 225 KB.
// ---------------------------------------------------------------------------------------------------
constexpr int kWgStages = 3;
constexpr int kWgStageFloats = (kBM + kBN) * kBK;        // unpadded A + B
constexpr int kWgTileBytes = 128 * kBK * 4;              // one [128][32] TF32 tile = 16 KB
constexpr int kWgSplitBytes = 4 * kWgTileBytes;          // A_big, A_small, B_big, B_small
constexpr int kWgSmemBytes = kWgStages * kWgStageFloats * 4 + 2 * kWgSplitBytes + 1024;
static_assert(kBK * 4 == 128, "one k-tile row is exactly one 128-byte swizzle row");
static_assert(kBM == 128 && kBN == 128, "the split pass and wgmma shapes assume 128 x 128");

__device__ __forceinline__ uint64_t wg_desc(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(1) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (static_cast<uint64_t>(1) << 62);
}

// Byte offset of TF32 element (r, k) in a [128][32] K-major 128-byte-swizzled tile, k a multiple of 4.
__device__ __forceinline__ uint32_t sw128(int r, int k) {
  return static_cast<uint32_t>(r * 128 + ((((k >> 2) ^ (r & 7))) << 4));
}

__device__ __forceinline__ void st_shared_v4(uint32_t addr, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(x), "r"(y), "r"(z), "r"(w)
               : "memory");
}

// small = rna_tf32(x - trunc_tf32(x)) of an fp32 bit pattern, as the tensor core reads it: the small part when
// big is x itself (the tensor core truncates x). x - trunc(x) has x's sign; rounding it to nearest keeps the
// error unbiased. The rounding is only the half-ulp add: the tensor core drops the low 13 bits itself, so the
// mask of to_tf32 would change nothing it reads (one instruction less per B value in the splitter warps:
// 103.7 -> 106.0 TFLOP/s on the headline, H100, gemm_ablate run of 70906a4).
__device__ __forceinline__ uint32_t tf32_remainder(uint32_t bits) {
  return __float_as_uint(__uint_as_float(bits) - __uint_as_float(bits & 0xffffe000u)) + 0x1000u;
}

__device__ __forceinline__ void split4_store(uint32_t big_addr, uint32_t small_addr, float x0, float x1,
                                             float x2, float x3) {
  uint32_t b0, b1, b2, b3, s0, s1, s2, s3;
  split_tf32(x0, b0, s0);
  split_tf32(x1, b1, s1);
  split_tf32(x2, b2, s2);
  split_tf32(x3, b3, s3);
  st_shared_v4(big_addr, b0, b1, b2, b3);
  st_shared_v4(small_addr, s0, s1, s2, s3);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// wgmma.wait_group with a constant operand (pending folds to 0 or 1 after unrolling): at most `pending` commit
// groups still in flight.
__device__ __forceinline__ void wgmma_wait_pending(int pending) {
  if (pending == 0) asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  if (pending == 1) asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
}
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// d[64] += A(desc) . B(desc)^T over k8; scale_d = 0 ignores the old d (fresh accumulator).
__device__ __forceinline__ void wgmma_m64n128k8(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
        "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
        "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(scale_d)
      : "memory");
}

template <bool kBKMajor, int kVec, class Epilogue>
__global__ void __launch_bounds__(kThreads, 1)
    gemm3x_wgmma_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                        int M, int N, int K, int lda, int ldb, int ldc, long long stride_a,
                        long long stride_b, long long stride_c, Epilogue epi) {
  extern __shared__ __align__(1024) unsigned char wg_smem_raw[];
  // Split buffers first, on a 1024-byte boundary (swizzle atoms); staging after them.
  const uint32_t raw_addr = smem_addr(wg_smem_raw);
  const uint32_t pad = (1024u - (raw_addr & 1023u)) & 1023u;
  unsigned char* base = wg_smem_raw + pad;
  const uint32_t split_addr = raw_addr + pad;                            // 2 x [A_big, A_small, B_big, B_small]
  float* staging = reinterpret_cast<float*>(base + 2 * kWgSplitBytes);   // kWgStages x [A | B]

  const int batch = static_cast<int>(blockIdx.z);
  A += batch * stride_a;
  B += batch * stride_b;
  C += batch * stride_c;
  const int m0 = static_cast<int>(blockIdx.x) * kBM;
  const int n0 = static_cast<int>(blockIdx.y) * kBN;
  const int tid = static_cast<int>(threadIdx.x);
  const int wg = tid / 128;
  const int k_tiles = (K + kBK - 1) / kBK;

  auto load_stage = [&](int kt) {
    float* sa = staging + (kt % kWgStages) * kWgStageFloats;
    float* sb = sa + kBM * kBK;
    const int k0 = kt * kBK;
    load_tile<kBM, kBK, kBK, kVec>(sa, A, lda, m0, k0, M, K);
    if constexpr (kBKMajor) {
      load_tile<kBN, kBK, kBK, kVec>(sb, B, ldb, n0, k0, N, K);
    } else {
      load_tile<kBK, kBN, kBN, kVec>(sb, B, ldb, k0, n0, K, N);
    }
  };

  // Staged fp32 tile kt -> split buffer kt % 2 (16 A values and 16 B values per thread).
  auto split_stage = [&](int kt) {
    const float* sa = staging + (kt % kWgStages) * kWgStageFloats;
    const float* sb = sa + kBM * kBK;
    const uint32_t buf = split_addr + (kt & 1) * kWgSplitBytes;
#pragma unroll
    for (int i = 0; i < (kBM * kBK / 4) / kThreads; ++i) {  // A: 1024 chunks of 4 k
      const int c = i * kThreads + tid;
      const int r = c >> 3;
      const int k = (c & 7) * 4;
      const float4 v = *reinterpret_cast<const float4*>(sa + r * kBK + k);
      split4_store(buf + sw128(r, k), buf + kWgTileBytes + sw128(r, k), v.x, v.y, v.z, v.w);
    }
#pragma unroll
    for (int i = 0; i < (kBN * kBK / 4) / kThreads; ++i) {  // B: 1024 chunks of 4 k
      const int c = i * kThreads + tid;
      int n;
      int k;
      float4 v;
      if constexpr (kBKMajor) {
        n = c >> 3;
        k = (c & 7) * 4;
        v = *reinterpret_cast<const float4*>(sb + n * kBK + k);
      } else {  // [k][n] staging: consecutive threads take consecutive n (conflict-free column reads)
        n = c & (kBN - 1);
        k = (c >> 7) * 4;
        v = make_float4(sb[k * kBN + n], sb[(k + 1) * kBN + n], sb[(k + 2) * kBN + n], sb[(k + 3) * kBN + n]);
      }
      split4_store(buf + 2 * kWgTileBytes + sw128(n, k), buf + 3 * kWgTileBytes + sw128(n, k), v.x, v.y, v.z,
                   v.w);
    }
    fence_proxy_async();  // generic-proxy stores -> visible to wgmma (async proxy) after the barrier
  };

  float acc[64];
  float tile[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < 64; ++i) tile[i] = 0.0f;

  // Prologue: tiles 0 .. kWgStages-2 in flight; tile 0 split.
#pragma unroll
  for (int s = 0; s < kWgStages - 1; ++s) {
    if (s < k_tiles) load_stage(s);
    cp_async_commit();
  }
  cp_async_wait<kWgStages - 2>();
  __syncthreads();
  if (k_tiles > 0) split_stage(0);
  __syncthreads();

  for (int kt = 0; kt < k_tiles; ++kt) {
    // 1. This tile's 12 wgmmas, asynchronous.
    {
      const uint32_t buf = split_addr + (kt & 1) * kWgSplitBytes;
      const uint32_t a_big = buf + wg * 64 * 128;
      const uint32_t a_small = a_big + kWgTileBytes;
      const uint32_t b_big = buf + 2 * kWgTileBytes;
      const uint32_t b_small = buf + 3 * kWgTileBytes;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 8; ++kk) {
        const uint32_t off = kk * 32;
        wgmma_m64n128k8(tile, wg_desc(a_small + off), wg_desc(b_big + off), kk == 0 ? 0 : 1);
        wgmma_m64n128k8(tile, wg_desc(a_big + off), wg_desc(b_small + off), 1);
        wgmma_m64n128k8(tile, wg_desc(a_big + off), wg_desc(b_big + off), 1);
      }
      wgmma_commit();
    }
    // 2. Meanwhile: tile kt+1 has landed (all groups but the newest may be pending = none with 3
    //    stages, see the committed count), refill the staging slot of tile kt-1, split tile kt+1.
    if (kt + 1 < k_tiles) {
      cp_async_wait<kWgStages - 3>();
      __syncthreads();  // tile kt+1 visible to every thread
      if (kt + kWgStages - 1 < k_tiles) load_stage(kt + kWgStages - 1);
      cp_async_commit();
      split_stage(kt + 1);  // buffer (kt+1)%2 was last read by tile kt-1's wgmmas, finished before
                            // the barrier that ended iteration kt-1
    }
    // 3. Flush this tile's products into the running sum (round to nearest).
    wgmma_wait_pending(0);
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] += tile[i];
    __syncthreads();  // split kt+1 visible to both warpgroups; both done reading buffer kt%2
  }
  cp_async_wait<0>();

  // Epilogue from the accumulator fragment, bounds-checked.
  const int lane = tid & 31;
  const int row_base = m0 + wg * 64 + ((tid & 127) >> 5) * 16 + (lane >> 2);
  const int col_base = n0 + 2 * (lane & 3);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = row_base + (e >> 1) * 8;
      const int col = col_base + j * 8 + (e & 1);
      if (row < M && col < N) {
        C[static_cast<long long>(row) * ldc + col] = epi(acc[4 * j + e], batch, row, col);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Variant 2 (sm_90a): warp-specialised wgmma with A from registers, selected with
// gemm3x_set_variant(2).
//
// 512 threads = 4 warpgroups, block tile 128 x 128 x 32 (same tiling of C as variants 0 and 1), a ring of
// kWsStages (4) slots in shared memory, three mbarriers per slot (loaded, full, empty). Persistent: the
// launcher starts one block per multiprocessor (min(tiles, SMs)), and every role loops over output tiles
// t = blockIdx.x, + gridDim.x, ... (WsTile: m-tile fastest, then n-tile, then batch), the ring's slot and
// parity running on from one tile to the next, so a tile's first loads overlap the previous tile's last
// wgmmas and its stores (K = 64, 64 x 1024 x 1024: 0.322 -> 0.133 ms with the 8-byte stores below).
//   * warpgroups 0, 1 = consumers (setmaxnreg.inc: kWsConsumerRegs), rows 64 w .. 64 w + 63 of the tile.
//     Per flush of kWsTilesPerFlush (2) k-tiles, each k-tile h: wait full[s + h]; ldmatrix.x4 the fp32 A
//     fragments of its 4 k8 steps from the slot and split them in registers (wgmma with A from registers:
//     the m64k8 tf32 A fragment is the m16n8k8 one per warp, a0 (g, t), a1 (g+8, t), a2 (g, t+4),
//     a3 (g+8, t+4), warp q of the warpgroup on rows 16q..16q+15); its 8 small-part wgmma.m64n128k8
//     (a_small.b_big, a_big.b_small per k8; B from the swizzled smem tiles through descriptors exactly as
//     variant 1) into the flush's fresh accumulator (the first with scale-d = 0). Then the big products
//     a_big.b_big, 4 per k-tile, one commit group per k-tile (see "Accumulation" at the top for the order).
//     wgmma.wait_group 1, then 0: as k-tile h's group completes, one lane per warp arrives on empty[s + h]
//     (8 arrivals complete the phase). Then the round-to-nearest flush acc += tile. After the last flush
//     the epilogue stores the tile (pairs of columns as 8-byte stores when C's rows are 8-byte aligned).
//   * warpgroups 2, 3 = producers (setmaxnreg.dec: kWsProducerRegs), two roles:
//     - loader warps 8, 9: for each k-tile wait empty[s] (s = the k-tile's count % 4), then fill slot s with the
//       fp32 A tile and the fp32 B tile. TMA when both are K-major (TN) with 16-byte aligned rows: one thread
//       arms loaded[s] with the slot's bytes (mbarrier.arrive.expect_tx) and issues two 32 x 128 boxes of
//       3-D tensor maps (k, row, batch) in the 128-byte swizzle, zero-filled past the edges. Otherwise (NN, or
//       unaligned rows) all 64 threads issue bounds-checked, zero-filling cp.async copies, then
//       cp.async.mbarrier.arrive.noinc on loaded[s] (64 arrivals complete the phase). Loaders run up to 4
//       tiles ahead of the consumers.
//     - splitter warps 10-15: wait loaded[s], write B_small = rna_tf32(B - trunc(B)) (swizzled) next to B,
//       fence.proxy.async (their st.shared -> visible to the consumers' wgmmas), arrive on full[s] (192).
//       They have no cp.async of their own in flight, so the fence's MEMBAR waits for nothing else.
//     Why TMA and six splitters (H100, headline 1024x8192x8192, gemm_ablate run of e5e8b3d): a clock64 trace
//     of block 0 showed the producers, not the tensor cores, setting the pace: with cp.async, 1670 cycles per
//     k-tile to issue the loads and 2200 to split B, of a 2430-cycle k-tile, consumers waiting on full 26% of
//     the time. TMA alone: issue 205 cycles, 101.8 TFLOP/s (cp.async 100.6), the split then 2450 cycles;
//     TMA with six splitter warps instead of two: 137.3 TFLOP/s, the same error. (Six splitters with cp.async
//     loads were 1.6% slower than two: the copies' instructions share the issue slots.) Consumers wait on
//     loaded[s] as well as full[s]: the TMA's async-proxy writes of A are then ordered before their ldmatrix
//     by the barrier the copies completed.
// Slot layout (48 KB, 1024-byte aligned): A fp32 [128][32] in the 128-byte swizzle layout (an ldmatrix
// phase reads 8 consecutive rows = 8 different 16-byte bank groups), B_big [128 n][32 k] and B_small
// [128 n][32 k] TF32 in the swizzle layout wgmma reads. The fp32 B tile is copied into the B_big region
// and is B_big as it is (the tensor core drops the low 13 bits of what it reads); the split writes only
// B_small, at the same swizzled offsets.
// NN's B ([K][N] in global) is transposed by the copy: 4-byte cp.async of B[k][n] to (n, k); consecutive
// threads take consecutive n (coalesced global reads, 4-way smem write conflicts). A, and TN's B, use
// 16-byte copies when aligned (kVec = 4), else 4-byte copies, as the other variants.
// Shared memory: 4 slots x 48 KB + 1 KB alignment + 12 mbarriers = 197,728 bytes. No shape or alignment
// falls back to another variant: all copies and stores are bounds-checked as in variants 0/1.
// Sync: phases are waited by parity: loaded[s] and full[s] with (j / 4) & 1, empty[s] with ((j / 4) & 1) ^ 1
// (which passes at once on each slot's first use), j counting the block's k-tiles over all its output tiles.
// Every thread of a role runs the same k-tiles (K is padded to whole flushes; the loaders zero-fill past K),
// so arrival counts always match; a mismatch would hang, not crash (the protocol is modelled in
// tests/test_dev_kernels_compile.py). Registers: 512 threads put 4 warps on a sub-partition, so ptxas
// caps the kernel at 128; setmaxnreg moves registers from the producers (48) to the consumers (208), which
// need 186 for the mainloop and up to ~200 with the generated epilogues.
constexpr int kWsStages = 4;
constexpr int kWsTilesPerFlush = 2;  // k-tiles per fresh accumulator (consumers take slots in pairs)
static_assert(kWsStages % kWsTilesPerFlush == 0, "a flush's slots never wrap around the ring");
static_assert(kWsTilesPerFlush == 1 || kWsTilesPerFlush == 2, "wgmma_wait_pending covers 0 and 1");
// Producer warpgroups: 1 (warps 8, 9 load, 10, 11 split) or 2 (warps 8, 9 load, 10-15 split: the split's
// instructions spread over every sub-partition's scheduler, at fewer registers per producer thread).
#ifndef GEMM3X_WS_PRODUCER_WARPGROUPS
#define GEMM3X_WS_PRODUCER_WARPGROUPS 2
#endif
constexpr int kWsProducerWarpgroups = GEMM3X_WS_PRODUCER_WARPGROUPS;
static_assert(kWsProducerWarpgroups == 1 || kWsProducerWarpgroups == 2, "one or two producer warpgroups");
constexpr int kWsLoaderThreads = 64;                // producer warps 8, 9: cp.async
constexpr int kWsSplitterThreads = 128 * kWsProducerWarpgroups - kWsLoaderThreads;  // the other producer warps
constexpr int kWsThreads = 256 + 128 * kWsProducerWarpgroups;  // 384 or 512
constexpr int kWsChunksPerLoader = 1024 / kWsLoaderThreads;      // 16-byte chunks of A (and of B) per tile
constexpr int kWsSlotBytes = 3 * kWgTileBytes;       // A fp32, B_big, B_small: 48 KB
constexpr int kWsSmemBytes = kWsStages * kWsSlotBytes + 1024 + 3 * kWsStages * 8;
static_assert(1024 % kWsLoaderThreads == 0, "whole chunks per loader thread");
static_assert(kWsSplitterThreads % 32 == 0, "whole splitter warps");
// 384 threads put 3 warps on some SM sub-partition, so ptxas caps every thread at 168 registers (512: 128); the
// consumers need more (64 + 64 accumulators + 32 A fragment registers + addresses: 186 in SASS).
// setmaxnreg moves registers from the producer warpgroups (which use <= 54) to the consumers; ptxas
// allocates each role's code within its new limit.
constexpr int kWsProducerRegsOneGroup = 72;
constexpr int kWsProducerRegsTwoGroups = 48;  // at 56 or 64 the consumers (208 or 192 registers) spill
#ifndef GEMM3X_WS_PRODUCER_REGS
#define GEMM3X_WS_PRODUCER_REGS (kWsProducerWarpgroups == 1 ? kWsProducerRegsOneGroup : kWsProducerRegsTwoGroups)
#endif
constexpr int kWsProducerRegs = GEMM3X_WS_PRODUCER_REGS;
// The pool setmaxnreg.inc draws from is what the block was launched with (168 x 384 = 64512 registers,
// as CUTLASS's 40/232 and FA3's 24/240 splits use exactly): asking for more would block forever.
constexpr int kWsLaunchRegs = 65536 / kWsThreads / 8 * 8;  // 168 or 128
constexpr int kWsConsumerRegs =
    (kWsLaunchRegs * kWsThreads - kWsProducerRegs * 128 * kWsProducerWarpgroups) / 256 / 8 * 8;
static_assert(kWsProducerRegs % 8 == 0 && kWsProducerRegs >= 24 && kWsProducerRegs <= kWsLaunchRegs,
              "setmaxnreg.dec range");
static_assert(kWsConsumerRegs % 8 == 0 && kWsConsumerRegs >= kWsLaunchRegs && kWsConsumerRegs <= 256,
              "setmaxnreg.inc range");
static_assert(kWsProducerRegs * 128 * kWsProducerWarpgroups + kWsConsumerRegs * 256 <= kWsLaunchRegs * kWsThreads,
              "setmaxnreg must not ask for more registers than the block holds");

template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

__device__ __forceinline__ void mbar_init(uint32_t addr, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(addr), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t addr) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(addr) : "memory");
}
// The mbarrier receives one arrival (counted against its expected count: .noinc) once every cp.async this
// thread issued before has completed.
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(uint32_t addr) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(addr) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t addr, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
}
// TMA (variant 2): the expected bytes of this phase plus one arrival; the copies' bytes complete it.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t addr, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(addr), "r"(bytes) : "memory");
}
// One box of a 3-D tensor map (k, row, batch) into shared memory, completing `bytes` on the mbarrier; boxes
// reaching past the tensor's edges are zero-filled (and still count their full size).
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int k, int row, int batch,
                                            uint32_t mbar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(k), "r"(row), "r"(batch), "r"(mbar)
      : "memory");
}

__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

// Loader copies (variant 2), 64 loader threads. K-major tile ([128 rows][32 k] from a row-major [rows][K]
// matrix: A, and TN's B): thread t copies the 16-byte chunk (row 8i + t/8, k 4(t%8) .. +3) for i < 16 into
// its 128-byte-swizzled position (which is sw128(t/8, 4(t%8)) + 1024 i, as (row & 7) does not change).
// One running pointer per thread keeps the register count low. Out-of-range rows / k copy 0 bytes and
// zero-fill; a chunk straddling K copies its valid bytes (kVec = 4) or elements (kVec = 1).
template <int kVec>
__device__ __forceinline__ void ws_load_kmajor(uint32_t dst_tile, const float* g, int ld, int row0, int rows,
                                               int k0, int K, int ltid) {
  const int r0 = ltid >> 3;
  const int kq = (ltid & 7) * 4;
  const int rows_left = rows - row0 - r0;  // chunk i is inside the matrix iff 8 i < rows_left
  const int k_left = K - k0 - kq;          // valid k of this thread's chunks
  const float* p = g + static_cast<long long>(row0 + r0) * ld + k0 + kq;
  const long long step = 8LL * ld;
  const uint32_t dst = dst_tile + sw128(r0, kq);
  static_assert(kWsChunksPerLoader * kWsLoaderThreads == 128 * 8 && kWsLoaderThreads == 64, "8 rows per pass");
#pragma unroll
  for (int i = 0; i < kWsChunksPerLoader; ++i) {
    const bool row_ok = 8 * i < rows_left;
    if constexpr (kVec == 4) {
      int valid = k_left < 0 ? 0 : (k_left > 4 ? 4 : k_left);
      if (!row_ok) valid = 0;
      cp_async<4>(dst + 1024 * i, valid > 0 ? p : g, valid * 4);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bool ok = row_ok && e < k_left;
        cp_async<1>(dst + 1024 * i + 4 * e, ok ? p + e : g, ok ? 4 : 0);
      }
    }
    p += step;
  }
}

// NN's B ([K][N] row-major) -> [128 n][32 k] K-major swizzled tile: 4-byte copies of B[k][n] to (n, k);
// thread t takes n = t and n = t + 64 of every k row (coalesced 256-byte global reads per warp).
__device__ __forceinline__ void ws_load_nn_b(uint32_t dst_tile, const float* B, int ldb, int n0, int N, int k0,
                                             int K, int ltid) {
  const bool n_ok0 = n0 + ltid < N;
  const bool n_ok1 = n0 + ltid + 64 < N;
  const float* p = B + static_cast<long long>(k0) * ldb + n0 + ltid;
#pragma unroll
  for (int kr = 0; kr < kBK; ++kr) {
    const bool k_ok = k0 + kr < K;
    const uint32_t off = sw128(ltid, kr & ~3) + (kr & 3) * 4;  // sw128(ltid + 64, .) = this + 64 * 128
    cp_async<1>(dst_tile + off, k_ok && n_ok0 ? p : B, k_ok && n_ok0 ? 4 : 0);
    cp_async<1>(dst_tile + off + 64 * 128, k_ok && n_ok1 ? p + 64 : B, k_ok && n_ok1 ? 4 : 0);
    p += ldb;
  }
}

// d[64] += A(registers) . B(desc)^T over k8; scale_d = 0 ignores the old d (fresh accumulator).
__device__ __forceinline__ void wgmma_m64n128k8_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t db,
                                                   int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
        "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
        "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d)
      : "memory");
}

// Output tile t of a persistent block: tiles are numbered m-tile fastest, then n-tile, then batch.
struct WsTile {
  int batch, m0, n0;
  __device__ __forceinline__ WsTile(int t, int tiles_m, int tiles_n)
      : batch(t / (tiles_m * tiles_n)), m0((t % tiles_m) * kBM), n0((t / tiles_m) % tiles_n * kBN) {}
};

template <bool kBKMajor, int kVec, class Epilogue>
__global__ void __launch_bounds__(kWsThreads, 1)
    gemm3x_ws_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                     int M, int N, int K, int lda, int ldb, int ldc, long long stride_a, long long stride_b,
                     long long stride_c, int tiles_m, int tiles_n, int tiles, bool c_pairs,
                     const __grid_constant__ CUtensorMap tma_a, const __grid_constant__ CUtensorMap tma_b,
                     bool tma, Epilogue epi) {
  extern __shared__ __align__(1024) unsigned char ws_smem_raw[];
  const uint32_t raw_addr = smem_addr(ws_smem_raw);
  const uint32_t ring = raw_addr + ((1024u - (raw_addr & 1023u)) & 1023u);  // slot s at ring + s * 48 KB
  const uint32_t full_bar = ring + kWsStages * kWsSlotBytes;                 // kWsStages x 8 bytes
  const uint32_t empty_bar = full_bar + kWsStages * 8;
  const uint32_t loaded_bar = empty_bar + kWsStages * 8;

  const int tid = static_cast<int>(threadIdx.x);
  const int wg = tid / 128;
  const int k_tiles = (K + kBK - 1) / kBK;
  // whole flushes: the tiles past K are zero-filled by the loaders and add exact zeros
  const int k_tiles_padded = (k_tiles + kWsTilesPerFlush - 1) / kWsTilesPerFlush * kWsTilesPerFlush;

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < kWsStages; ++s) {
      mbar_init(full_bar + 8 * s, kWsSplitterThreads);  // every splitter thread
      mbar_init(empty_bar + 8 * s, 8);                  // one lane of each consumer warp
      // every loader thread's cp.asyncs (.noinc), or the TMA thread's expect_tx and the copies' bytes
      mbar_init(loaded_bar + 8 * s, tma ? 1 : kWsLoaderThreads);
    }
  }
  __syncthreads();

  if (wg >= 2) {
    // ------------------------------------------------------------ producer warpgroup(s) (warps 8-11 or 8-15)
    setmaxnreg_dec<kWsProducerRegs>();
    const int ptid = tid - 256;  // 0 .. 128 * kWsProducerWarpgroups - 1
    if (tma && ptid < kWsLoaderThreads) {
      // TMA: one thread issues each k-tile's two boxes (A rows m0 .., B rows n0 .., k0 .. k0 + 31; zero-filled
      // past the edges) into slot s, in the 128-byte swizzle that the consumers and the splitters read.
      if (ptid == 0) {
        uint32_t s = 0;
        uint32_t phase = 0;
        for (int t = static_cast<int>(blockIdx.x); t < tiles; t += static_cast<int>(gridDim.x)) {
          const WsTile out(t, tiles_m, tiles_n);
          for (int it = 0; it < k_tiles_padded; ++it) {
            mbar_wait(empty_bar + 8 * s, phase ^ 1u);  // passes at once on each slot's first use
            const uint32_t sa = ring + s * kWsSlotBytes;
            mbar_arrive_expect_tx(loaded_bar + 8 * s, 2 * kWgTileBytes);
            tma_load_3d(sa, &tma_a, it * kBK, out.m0, out.batch, loaded_bar + 8 * s);
            tma_load_3d(sa + kWgTileBytes, &tma_b, it * kBK, out.n0, out.batch, loaded_bar + 8 * s);
            if (++s == kWsStages) {
              s = 0;
              phase ^= 1u;
            }
          }
        }
      }
    } else if (ptid < kWsLoaderThreads) {
      // Loader warps 8, 9: fp32 A and B tiles -> slot, up to kWsStages tiles ahead of the consumers.
      uint32_t s = 0;
      uint32_t phase = 0;
      for (int t = static_cast<int>(blockIdx.x); t < tiles; t += static_cast<int>(gridDim.x)) {
        const WsTile out(t, tiles_m, tiles_n);
        const float* a_batch = A + out.batch * stride_a;
        const float* b_batch = B + out.batch * stride_b;
        for (int it = 0; it < k_tiles_padded; ++it) {
          mbar_wait(empty_bar + 8 * s, phase ^ 1u);  // passes at once on each slot's first use
          const uint32_t sa = ring + s * kWsSlotBytes;
          const uint32_t sb = sa + kWgTileBytes;  // fp32 B, read by the tensor core as B_big
          const int k0 = it * kBK;
          ws_load_kmajor<kVec>(sa, a_batch, lda, out.m0, M, k0, K, ptid);
          if constexpr (kBKMajor) {
            ws_load_kmajor<kVec>(sb, b_batch, ldb, out.n0, N, k0, K, ptid);
          } else {
            ws_load_nn_b(sb, b_batch, ldb, out.n0, N, k0, K, ptid);
          }
          // loaded[s] counts this thread's arrival when all of its cp.asyncs so far have landed.
          cp_async_mbar_arrive_noinc(loaded_bar + 8 * s);
          if (++s == kWsStages) {
            s = 0;
            phase ^= 1u;
          }
        }
      }
      cp_async_commit();
      cp_async_wait<0>();  // no copies left in flight when the thread exits
    } else {
      // Splitter warps (10 up): once a tile has landed, B_small = rna_tf32(B - trunc(B)) next to it (the fp32
      // B tile is B_big); then release the slot to the consumers.
      const int stid = ptid - kWsLoaderThreads;
      uint32_t s = 0;
      uint32_t phase = 0;
      const int my_tiles = (tiles - static_cast<int>(blockIdx.x) + static_cast<int>(gridDim.x) - 1) /
                           static_cast<int>(gridDim.x);  // as many as the loaders' and consumers' loops
      for (int j = 0; j < my_tiles * k_tiles_padded; ++j) {
        mbar_wait(loaded_bar + 8 * s, phase);
        const uint32_t b_big = ring + s * kWsSlotBytes + kWgTileBytes;
        const uint32_t b_small = b_big + kWgTileBytes;
#pragma unroll
        for (int c = stid; c < 1024; c += kWsSplitterThreads) {  // 8 lanes = one 128-byte row: conflict-free
          const uint32_t off = sw128(c >> 3, (c & 7) * 4);
          const uint4 v = ld_shared_v4(b_big + off);
          st_shared_v4(b_small + off, tf32_remainder(v.x), tf32_remainder(v.y), tf32_remainder(v.z),
                       tf32_remainder(v.w));
        }
        fence_proxy_async();  // this thread's split stores -> visible to the consumers' wgmmas
        mbar_arrive(full_bar + 8 * s);
        if (++s == kWsStages) {
          s = 0;
          phase ^= 1u;
        }
      }
    }
    return;
  }

  // -------------------------------------------------------------------- consumers (warpgroups 0, 1)
  setmaxnreg_inc<kWsConsumerRegs>();
  const int cw = wg;                // rows 64 cw .. 64 cw + 63 of the block tile
  const int ctid = tid - 128 * cw;  // 0..127 within the warpgroup
  const int lane = tid & 31;
  const int q = ctid >> 5;        // warp within the warpgroup: rows 16 q .. 16 q + 15 of its 64

  float acc[64];
  float tile[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) tile[i] = 0.0f;

  // ldmatrix row of this lane: blocks (rows 0-7, k 0-3), (rows 8-15, k 0-3), (rows 0-7, k 4-7),
  // (rows 8-15, k 4-7) of the warp's 16 x 8 slice of each k8 step. In the swizzled A tile, k8 step kk's
  // 16-byte chunk of this lane is (2 kk + half) ^ (row & 7) = (half ^ (lane & 7)) ^ 2 kk.
  const int a_row = 64 * cw + 16 * q + (lane & 7) + ((lane >> 3) & 1) * 8;
  const uint32_t a_lane_off = static_cast<uint32_t>(a_row * 128);
  const uint32_t a_chunk = static_cast<uint32_t>((lane >> 4) ^ (lane & 7));

  uint32_t s = 0;  // first slot of the flush (kWsStages is a multiple of kWsTilesPerFlush: s + h never wraps)
  uint32_t phase = 0;
#pragma unroll 1
  for (int t = static_cast<int>(blockIdx.x); t < tiles; t += static_cast<int>(gridDim.x)) {
    const WsTile out(t, tiles_m, tiles_n);
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
#pragma unroll 1
    for (int kt = 0; kt < k_tiles_padded; kt += kWsTilesPerFlush) {
      // One flush: a fresh accumulator gets the two small-part products of every k-tile of the flush first,
      // then the big products (see "Accumulation" at the top: each wgmma truncates the running sum toward
      // zero, so the sum should be small for as many of them as possible). Tile h's A fragments are split in
      // registers once its slot has landed. Commit groups: group 0 = all small products and tile 0's big
      // ones, group h = tile h's big ones, so slot s + h is free once group h has completed.
      uint32_t a_big[kWsTilesPerFlush][kBK / 8][4];
      uint32_t a_small[kWsTilesPerFlush][kBK / 8][4];
      uint32_t b_big[kWsTilesPerFlush];
#pragma unroll
      for (int h = 0; h < kWsTilesPerFlush; ++h) {
        mbar_wait(loaded_bar + 8 * (s + h), phase);  // the copies' own completion (TMA: async-proxy writes)
        mbar_wait(full_bar + 8 * (s + h), phase);
        const uint32_t sa = ring + (s + h) * kWsSlotBytes;
        b_big[h] = sa + kWgTileBytes;
        const uint32_t b_small = b_big[h] + kWgTileBytes;
#pragma unroll
        for (int kk = 0; kk < kBK / 8; ++kk) {
          uint32_t a[4];
          ldsm_x4(sa + a_lane_off + ((a_chunk ^ (2u * kk)) << 4), a[0], a[1], a[2], a[3]);
#pragma unroll
          for (int e = 0; e < 4; ++e) split_tf32(__uint_as_float(a[e]), a_big[h][kk][e], a_small[h][kk][e]);
        }
        wgmma_fence();  // A registers (and, for h = 0, the accumulator's last reader) before the wgmmas
#pragma unroll
        for (int kk = 0; kk < kBK / 8; ++kk) {
          const uint32_t off = kk * 32;
          wgmma_m64n128k8_rs(tile, a_small[h][kk], wg_desc(b_big[h] + off), h == 0 && kk == 0 ? 0 : 1);
          wgmma_m64n128k8_rs(tile, a_big[h][kk], wg_desc(b_small + off), 1);
        }
      }
#pragma unroll
      for (int h = 0; h < kWsTilesPerFlush; ++h) {
#pragma unroll
        for (int kk = 0; kk < kBK / 8; ++kk) wgmma_m64n128k8_rs(tile, a_big[h][kk], wg_desc(b_big[h] + kk * 32), 1);
        wgmma_commit();
      }
#pragma unroll
      for (int h = 0; h < kWsTilesPerFlush; ++h) {
        wgmma_wait_pending(kWsTilesPerFlush - 1 - h);  // tile h's group has completed
        __syncwarp();
        if (lane == 0) mbar_arrive(empty_bar + 8 * (s + h));  // this warp is done with slot s + h
      }
      s += kWsTilesPerFlush;
      if (s == kWsStages) {
        s = 0;
        phase ^= 1u;
      }
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[i] += tile[i];
    }

    // Epilogue from the accumulator fragment (variant 1's layout), bounds-checked: each thread holds pairs of
    // adjacent columns (2t, 2t + 1), stored as one 8-byte access when C's rows allow (c_pairs), so a warp's
    // store fills whole 32-byte sectors. The stores drain while the next tile's loads and wgmmas start.
    float* c_batch = C + out.batch * stride_c;
    const int row_base = out.m0 + 64 * cw + 16 * q + (lane >> 2);
    const int col_base = out.n0 + 2 * (lane & 3);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const int row = row_base + (e >> 1) * 8;
        const int col = col_base + j * 8;
        if (row >= M || col >= N) continue;
        float* c_row = c_batch + static_cast<long long>(row) * ldc;
        const float v0 = epi(acc[4 * j + e], out.batch, row, col);
        if (col + 1 < N) {
          const float v1 = epi(acc[4 * j + e + 1], out.batch, row, col + 1);
          if (c_pairs) {
            *reinterpret_cast<float2*>(c_row + col) = make_float2(v0, v1);
          } else {
            c_row[col] = v0;
            c_row[col + 1] = v1;
          }
        } else {
          c_row[col] = v0;
        }
      }
    }
  }  // output tiles
}

// ---------------------------------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------------------------------
// 0: mma.sync (default), 1: wgmma (sm_90a), 2: warp-specialised wgmma (sm_90a). Process-wide; set by gemm3x_set_variant (lab use).
inline int& variant() {
  static int v = 0;
  return v;
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

#ifndef GEMM3X_WS_TMA
#define GEMM3X_WS_TMA 1  // variant 2 loads K-major tiles with TMA when the tensor maps can describe them
#endif

// Tensor map of a K-major operand for variant 2's TMA loads: `rows` rows of K floats, leading dimension ld,
// `batch` matrices `stride` floats apart; boxes of 32 k x 128 rows x 1 matrix in the 128-byte swizzle.
// false when TMA cannot describe it (base not 16-byte aligned, a stride not a multiple of 16 bytes, an empty
// dimension, or no driver entry point); the cp.async loaders take the launch then.
inline bool kmajor_tensor_map(CUtensorMap* map, const float* base, int rows, int K, int ld, int batch,
                              long long stride) {
  using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                              const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                              CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
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
  if (encode == nullptr || !aligned16(base) || rows <= 0 || K <= 0 || batch <= 0 || ld % 4 != 0) return false;
  const long long batch_stride = batch > 1 ? stride : static_cast<long long>(ld) * rows;
  if (batch_stride <= 0 || batch_stride % 4 != 0) return false;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(K), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(batch)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(ld) * 4, static_cast<cuuint64_t>(batch_stride) * 4};
  const cuuint32_t box[3] = {kBK, 128, 1};
  const cuuint32_t unit[3] = {1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, const_cast<float*>(base), dims, strides, box, unit,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <bool kBKMajor, int kVec, class Epilogue>
cudaError_t launch_variant(const float* A, const float* B, float* C, int M, int N, int K, int lda, int ldb,
                           int ldc, int batch, long long stride_a, long long stride_b, long long stride_c,
                           Epilogue epi, cudaStream_t stream) {
  const int v = variant();
  auto ws_kernel = gemm3x_ws_kernel<kBKMajor, kVec, Epilogue>;
  auto kernel =
      v == 1 ? gemm3x_wgmma_kernel<kBKMajor, kVec, Epilogue> : gemm3x_tf32_kernel<kBKMajor, kVec, Epilogue>;
  const int bytes = v == 2 ? kWsSmemBytes : v == 1 ? kWgSmemBytes : Smem<kBKMajor>::kBytes;
  const int threads = v == 2 ? kWsThreads : kThreads;
  // The shared-memory limit is a per-device attribute of each kernel: set it once per (variant, device),
  // not on every launch (a driver call on the hot path). A race sets it twice, which is harmless.
  static unsigned long long configured[3] = {0, 0, 0};  // bit d: set on device d (d < 64)
  static int sms[64] = {0};                              // multiprocessors of device d (variant 2's grid)
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  const unsigned long long bit = device < 64 ? 1ull << device : 0ull;
  if (bit == 0 || (configured[v] & bit) == 0) {
    err = v == 2 ? cudaFuncSetAttribute(ws_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)
                 : cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (err != cudaSuccess) return err;
    configured[v] |= bit;
  }
  const int tiles_m = (M + kBM - 1) / kBM, tiles_n = (N + kBN - 1) / kBN;
  if (v == 2) {
    // Persistent: one block per multiprocessor (the kernel's registers and shared memory allow one), each
    // looping over output tiles t = blockIdx.x, + gridDim.x, ...: a tile's first loads start while the
    // previous tile's last wgmmas run and its stores drain, which matters when K is short.
    int count = device < 64 ? sms[device] : 0;
    if (count == 0) {
      err = cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
      if (err != cudaSuccess) return err;
      if (device < 64) sms[device] = count;
    }
    const long long tiles = static_cast<long long>(tiles_m) * tiles_n * batch;
    if (tiles > 0x7fffffffLL) return cudaErrorInvalidValue;
    const int grid = static_cast<int>(tiles < count ? tiles : count);
    // C[row][2i], C[row][2i + 1] as one 8-byte store: every row (and batch) start 8-byte aligned
    const bool c_pairs =
        (reinterpret_cast<uintptr_t>(C) & 7u) == 0 && ldc % 2 == 0 && (batch == 1 || stride_c % 2 == 0);
    // TMA when both operands are K-major (TN) rows the tensor maps can describe; otherwise the cp.async loaders.
    CUtensorMap map_a = {};
    CUtensorMap map_b = {};
    const bool tma = GEMM3X_WS_TMA && kVec == 4 && kBKMajor &&
                     kmajor_tensor_map(&map_a, A, M, K, lda, batch, stride_a) &&
                     kmajor_tensor_map(&map_b, B, N, K, ldb, batch, stride_b);
    ws_kernel<<<grid, threads, bytes, stream>>>(A, B, C, M, N, K, lda, ldb, ldc, stride_a, stride_b, stride_c,
                                                tiles_m, tiles_n, static_cast<int>(tiles), c_pairs, map_a, map_b,
                                                tma, epi);
    return cudaGetLastError();
  }
  const dim3 grid(tiles_m, tiles_n, batch);
  kernel<<<grid, threads, bytes, stream>>>(A, B, C, M, N, K, lda, ldb, ldc, stride_a, stride_b, stride_c,
                                           epi);
  return cudaGetLastError();
}


template <bool kBKMajor, class Epilogue>
cudaError_t launch(const float* A, const float* B, float* C, int M, int N, int K, int lda, int ldb, int ldc,
                   int batch, long long stride_a, long long stride_b, long long stride_c, Epilogue epi,
                   void* stream) {
  if (M < 0 || N < 0 || K < 0 || batch < 0) return cudaErrorInvalidValue;
  if (M == 0 || N == 0 || batch == 0) return cudaSuccess;
  if (batch > 65535) return cudaErrorInvalidValue;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  // The 16-byte path needs every row start (and every batch start) of A and B 16-byte aligned.
  const bool vec = aligned16(A) && aligned16(B) && lda % 4 == 0 && ldb % 4 == 0 &&
                   (batch == 1 || (stride_a % 4 == 0 && stride_b % 4 == 0));
  if (vec) {
    return launch_variant<kBKMajor, 4>(A, B, C, M, N, K, lda, ldb, ldc, batch, stride_a, stride_b, stride_c,
                                       epi, s);
  }
  return launch_variant<kBKMajor, 1>(A, B, C, M, N, K, lda, ldb, ldc, batch, stride_a, stride_b, stride_c,
                                     epi, s);
}

template <bool kBKMajor>
cudaError_t launch_bias(const float* A, const float* B, float* C, int M, int N, int K, int lda, int ldb,
                        int ldc, int batch, long long stride_a, long long stride_b, long long stride_c,
                        const float* bias, void* stream) {
  if (bias != nullptr) {
    return launch<kBKMajor>(A, B, C, M, N, K, lda, ldb, ldc, batch, stride_a, stride_b, stride_c,
                            Bias{bias}, stream);
  }
  return launch<kBKMajor>(A, B, C, M, N, K, lda, ldb, ldc, batch, stride_a, stride_b, stride_c, Identity{},
                          stream);
}

}  // namespace gemm3x

// ---------------------------------------------------------------------------------------------------
// C-callable launchers. Row-major, leading dimensions in elements; bias may be NULL; stream is a
// cudaStream_t (NULL = legacy default stream). Each returns the cudaError_t of the launch.
// ---------------------------------------------------------------------------------------------------

// Selects the kernel of every later launch: 0 = mma.sync (default), 1 = wgmma (sm_90a), 2 = warp-specialised
// wgmma with A from registers (sm_90a).
// Returns the previous variant, or -1 (and changes nothing) for an unknown one.
extern "C" int gemm3x_set_variant(int v) {
  if (v != 0 && v != 1 && v != 2) return -1;
  const int old = gemm3x::variant();
  gemm3x::variant() = v;
  return old;
}

// C[M,N] = A[M,K] . B[N,K]^T (+ bias[N])
extern "C" int gemm3x_tn(const float* A, const float* B, float* C, int M, int N, int K, int lda, int ldb,
                         int ldc, const float* bias, void* stream) {
  return static_cast<int>(gemm3x::launch_bias<true>(A, B, C, M, N, K, lda, ldb, ldc, 1, 0, 0, 0, bias, stream));
}

// C[M,N] = A[M,K] . B[K,N] (+ bias[N])
extern "C" int gemm3x_nn(const float* A, const float* B, float* C, int M, int N, int K, int lda, int ldb,
                         int ldc, const float* bias, void* stream) {
  return static_cast<int>(gemm3x::launch_bias<false>(A, B, C, M, N, K, lda, ldb, ldc, 1, 0, 0, 0, bias, stream));
}

// Strided-batched: for b < batch, C_b = A_b . B_b^T (+ bias), X_b = X + b * stride_x.
extern "C" int gemm3x_tn_batched(const float* A, const float* B, float* C, int M, int N, int K, int lda,
                                 int ldb, int ldc, int batch, long long stride_a, long long stride_b,
                                 long long stride_c, const float* bias, void* stream) {
  return static_cast<int>(gemm3x::launch_bias<true>(A, B, C, M, N, K, lda, ldb, ldc, batch, stride_a,
                                                    stride_b, stride_c, bias, stream));
}

// Strided-batched: for b < batch, C_b = A_b . B_b (+ bias), X_b = X + b * stride_x.
extern "C" int gemm3x_nn_batched(const float* A, const float* B, float* C, int M, int N, int K, int lda,
                                 int ldb, int ldc, int batch, long long stride_a, long long stride_b,
                                 long long stride_c, const float* bias, void* stream) {
  return static_cast<int>(gemm3x::launch_bias<false>(A, B, C, M, N, K, lda, ldb, ldc, batch, stride_a,
                                                     stride_b, stride_c, bias, stream));
}

// Epilogue example: C = sigmoid(A . B^T + bias[N]) * scale + R[M,N] (R row-major, leading dim ldr).
extern "C" int gemm3x_tn_bias_sigmoid_scale_residual(const float* A, const float* B, float* C, int M, int N,
                                                     int K, int lda, int ldb, int ldc, const float* bias,
                                                     float scale, const float* residual, int ldr,
                                                     void* stream) {
  const gemm3x::BiasSigmoidScaleResidual epi{bias, scale, residual, ldr, 0};
  return static_cast<int>(gemm3x::launch<true>(A, B, C, M, N, K, lda, ldb, ldc, 1, 0, 0, 0, epi, stream));
}
