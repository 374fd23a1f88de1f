// cutlass_3xtf32.cu -- CUTLASS's own 3xTF32 GEMM (the SM80 tensor-op kernel with OpMultiplyAddFastF32, as in
// CUTLASS example 27), for comparison with gemm_3xtf32.cu by dev/kernels/bench_cutlass.py. CUTLASS 4.2 has no
// SM90 (wgmma) 3xTF32 kernel; this is the mma.sync one, run on Hopper. Needs the CUTLASS headers
// (`nvidia-cutlass` wheel: cutlass_library/source/include) and -DNDEBUG.
//
// C[M,N] = A[M,K] . B[N,K]^T, all row-major (B column-major as [K, N]): the TN layout of a Linear layer.

#include <cutlass/cutlass.h>
#include <cutlass/gemm/device/gemm.h>
#include <cutlass/epilogue/thread/linear_combination.h>

namespace {

template <int kBM, int kBN, int kBK, int kWM, int kWN, int kStages>
using Gemm3xTF32 = cutlass::gemm::device::Gemm<
    float, cutlass::layout::RowMajor, float, cutlass::layout::ColumnMajor, float, cutlass::layout::RowMajor, float,
    cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80, cutlass::gemm::GemmShape<kBM, kBN, kBK>,
    cutlass::gemm::GemmShape<kWM, kWN, kBK>, cutlass::gemm::GemmShape<16, 8, 8>,
    cutlass::epilogue::thread::LinearCombination<float, 4, float, float>,
    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>, kStages, 4, 4, false,
    cutlass::arch::OpMultiplyAddFastF32>;

template <class Gemm>
int run(const float* A, const float* B, float* C, int M, int N, int K, int lda, int ldb, int ldc, void* stream) {
  typename Gemm::Arguments args({M, N, K}, {A, lda}, {B, ldb}, {C, ldc}, {C, ldc}, {1.0f, 0.0f});
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return 1;
  if (gemm.initialize(args, nullptr, static_cast<cudaStream_t>(stream)) != cutlass::Status::kSuccess) return 2;
  return gemm(static_cast<cudaStream_t>(stream)) == cutlass::Status::kSuccess ? 0 : 3;
}

}  // namespace

// config 0: example 27's tiles (block 128x64x16, warps 64x32, 3 stages); 1: block 128x128x16, warps 64x32,
// 4 stages; 2: block 128x128x32, warps 64x32, 3 stages (64x64 warp tiles spill). Returns 0, or 1-3 (cannot
// implement / init / run).
extern "C" int cutlass3x_tn(int config, const float* A, const float* B, float* C, int M, int N, int K, int lda,
                            int ldb, int ldc, void* stream) {
  switch (config) {
    case 0: return run<Gemm3xTF32<128, 64, 16, 64, 32, 3>>(A, B, C, M, N, K, lda, ldb, ldc, stream);
    case 1: return run<Gemm3xTF32<128, 128, 16, 64, 32, 4>>(A, B, C, M, N, K, lda, ldb, ldc, stream);
    case 2: return run<Gemm3xTF32<128, 128, 32, 64, 32, 3>>(A, B, C, M, N, K, lda, ldb, ldc, stream);
    default: return 4;
  }
}
