// CUTLASS 2.x implicit-GEMM conv2d fprop (NHWC x KRSC -> NPQK) on tensor cores, for the lab
// bench_conv_cutlass.py: is a tuned 3xTF32 convolution (fp32-class accuracy: each operand split into a TF32
// high and low part, three mma.sync per product) faster than cuDNN's exact-fp32 NCHW algorithm and our FFMA
// direct kernel on the few-input-channel shapes where eager is fp32-class? One configuration per build,
// chosen by -DFF_CONFIG=<n> (the builds run in parallel); each exports
//     extern "C" int ff_conv_cutlass_<n>(x, w, y, int dims[13], void* stream)
// dims = N, H, W, C, K, R, S, pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w. Returns 0 on success,
// 1000 + cutlass::Status where CUTLASS refuses the problem, or a cudaError_t.
#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cutlass/conv/conv2d_problem_size.h"
#include "cutlass/conv/device/implicit_gemm_convolution.h"
#include "cutlass/conv/kernel/default_conv2d_fprop.h"
#include "cutlass/epilogue/thread/linear_combination.h"

#ifndef FF_CONFIG
#define FF_CONFIG 0
#endif

namespace {

using Layout = cutlass::layout::TensorNHWC;
using Epilogue = cutlass::epilogue::thread::LinearCombination<float, 4, float, float>;
using Fast = cutlass::arch::OpMultiplyAddFastF32;  // 3xTF32
using Plain = cutlass::arch::OpMultiplyAdd;        // 1xTF32
using Few = std::integral_constant<cutlass::conv::IteratorAlgorithm, cutlass::conv::IteratorAlgorithm::kFewChannels>;
using Opt = std::integral_constant<cutlass::conv::IteratorAlgorithm, cutlass::conv::IteratorAlgorithm::kOptimized>;

template <class TB, class Warp, int Stages, class MathOp, class Algo>
using Kernel = typename cutlass::conv::kernel::DefaultConv2dFprop<
    float, Layout, float, Layout, float, Layout, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80, TB, Warp,
    cutlass::gemm::GemmShape<16, 8, 8>, Epilogue, cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<4>,
    Stages, MathOp, Algo::value, cutlass::conv::StrideSupport::kStrided, 4, 4>::Kernel;

#if FF_CONFIG == 0  // 3xTF32, channels gathered across taps (C % 4 == 0), 128 x 64 x 16, 4 warps
using Conv = cutlass::conv::device::ImplicitGemmConvolution<
    Kernel<cutlass::gemm::GemmShape<128, 64, 16>, cutlass::gemm::GemmShape<64, 32, 16>, 3, Fast, Few>>;
#elif FF_CONFIG == 1  // 3xTF32, few channels, 256 x 64 x 16, 8 warps
using Conv = cutlass::conv::device::ImplicitGemmConvolution<
    Kernel<cutlass::gemm::GemmShape<256, 64, 16>, cutlass::gemm::GemmShape<64, 32, 16>, 3, Fast, Few>>;
#elif FF_CONFIG == 2  // 3xTF32, few channels, 64 x 64 x 16, 4 warps of 32 x 32, 4 stages (fewer registers: more
                      // warps an SM; warps of 64 x 64 spilled 1.1 KB)
using Conv = cutlass::conv::device::ImplicitGemmConvolution<
    Kernel<cutlass::gemm::GemmShape<64, 64, 16>, cutlass::gemm::GemmShape<32, 32, 16>, 4, Fast, Few>>;
#elif FF_CONFIG == 3  // 1xTF32 (TF32-class: the ceiling of one mma per product), few channels, 128 x 64 x 16
using Conv = cutlass::conv::device::ImplicitGemmConvolution<
    Kernel<cutlass::gemm::GemmShape<128, 64, 16>, cutlass::gemm::GemmShape<64, 32, 16>, 3, Plain, Few>>;
#elif FF_CONFIG == 4  // 3xTF32, the optimized iterator (a tap's channels a k-step, C = 8 of 16 real)
using Conv = cutlass::conv::device::ImplicitGemmConvolution<
    Kernel<cutlass::gemm::GemmShape<128, 64, 16>, cutlass::gemm::GemmShape<64, 32, 16>, 3, Fast, Opt>>;
#endif

}  // namespace

#define FF_NAME2(a, b) a##b
#define FF_NAME(a, b) FF_NAME2(a, b)

extern "C" int FF_NAME(ff_conv_cutlass_, FF_CONFIG)(const float* x, const float* w, float* y, const int* d,
                                                   void* stream) {
    const int N = d[0], H = d[1], W = d[2], C = d[3], K = d[4], R = d[5], S = d[6];
    const int P = (H + 2 * d[7] - d[11] * (R - 1) - 1) / d[9] + 1;
    const int Q = (W + 2 * d[8] - d[12] * (S - 1) - 1) / d[10] + 1;
    cutlass::conv::Conv2dProblemSize problem({N, H, W, C}, {K, R, S, C}, {d[7], d[7], d[8], d[8]},
                                             {d[9], d[10]}, {d[11], d[12]}, {N, P, Q, K},
                                             cutlass::conv::Mode::kCrossCorrelation, 1);
    typename Conv::Arguments args(
        problem,
        {const_cast<float*>(x), Layout::packed({N, H, W, C})},
        {const_cast<float*>(w), Layout::packed({K, R, S, C})},
        {y, Layout::packed({N, P, Q, K})},
        {y, Layout::packed({N, P, Q, K})},
        {1.0f, 0.0f});
    Conv op;
    cutlass::Status status = op.can_implement(args);
    if (status != cutlass::Status::kSuccess) return 1000 + static_cast<int>(status);
    if (Conv::get_workspace_size(args) != 0) return 2000;  // split-k serial is off: none expected
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    status = op.initialize(args, nullptr, s);
    if (status != cutlass::Status::kSuccess) return 1000 + static_cast<int>(status);
    status = op(s);
    if (status != cutlass::Status::kSuccess) return 1000 + static_cast<int>(status);
    return static_cast<int>(cudaGetLastError());
}
