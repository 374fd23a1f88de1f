// The implicit-GEMM kernel's weight: [K, C, (KD,) KH, KW] -> [K][taps][cq] (channels zero-padded to cq), each value
// rounded to TF32 (round to nearest, ties away: add half of the 13 dropped bits, clear them), so that the tensor
// core's truncation of .tf32 operands leaves it as it is. split (3xTF32): [2K][taps][cq], rows K + k the small parts
// (each value minus its TF32 rounding, exact in fp32).
static torch::Tensor ff_conv_igemm_weight(const torch::Tensor& w, int64_t cq, bool split = false) {
    const int64_t k = w.size(0), c = w.size(1);
    torch::Tensor exact = w.reshape({k, c, -1}).permute({0, 2, 1});
    exact = torch::constant_pad_nd(exact, {0, cq - c}).contiguous();
    torch::Tensor re = split ? exact.clone() : exact;  // exact is a fresh tensor: rounded in place unless split
    torch::Tensor bits = re.view(torch::kInt);
    bits.add_(0x1000).bitwise_and_(static_cast<int64_t>(~0x1FFF));
    return split ? torch::cat({re, exact - re}) : re;
}

// The implicit-GEMM launcher's own codes (igemm.cuh's launch and prepare_input), else a CUDA error.
static void ff_conv_igemm_check(const char* kernel, int code) {
    TORCH_CHECK(code != 1001, kernel, ": the CUDA runtime has no cuTensorMapEncodeTiled entry point (TMA descriptors)");
    TORCH_CHECK(code != 1002, kernel, ": the input's TMA descriptor could not be encoded");
    TORCH_CHECK(code != 1003, kernel, ": the re-laid weight's TMA descriptor could not be encoded");
    TORCH_CHECK(code != 1004, kernel, ": sizes the tensor-core conv kernel does not take (a grid past its limits)");
    ff_check(kernel, code);
}

// The NCHW path's input as TMA reads it: its base 16-byte aligned (a view at an odd offset is copied).
static torch::Tensor ff_conv_igemm_aligned(const torch::Tensor& x) {
    return reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 ? x : x.clone();
}
