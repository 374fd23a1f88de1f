
// GEMM kernels: A is [M, K] (linear: [..., K], rows flattened), [batch, M, K] when batched; B is linear's weight
// [N, K] or [K, N] ([batch, K, N]). The kernel reads rows of A and rows of B as [N, K] (K-major tiles, which its
// TMA loads take), with unit stride along them and any leading dimension; other strides, and an NN product's
// [K, N] rows, are copied to contiguous [N, K] first.
struct FFGemm {
    torch::Tensor a, b;  // as the kernel reads them
    int64_t batch, m, n, k, lda, ldb, stride_a, stride_b;
    std::vector<int64_t> out_sizes;
};

static torch::Tensor ff_gemm_rows(torch::Tensor t) {  // unit stride along the last axis
    return t.size(-1) > 1 && t.stride(-1) != 1 ? t.contiguous() : t;
}

static int64_t ff_gemm_ld(const torch::Tensor& t) {  // leading dimension of the rows of t
    return t.size(-2) > 1 ? t.stride(-2) : t.size(-1);
}

static FFGemm ff_gemm_prepare(const char* kernel, const torch::Tensor& a, const torch::Tensor& b, bool batched,
                              bool b_is_nk) {
    for (const auto* t : {&a, &b}) {
        TORCH_CHECK(t->is_cuda(), kernel, ": GEMM operands must be CUDA tensors");
        TORCH_CHECK(t->scalar_type() == torch::kFloat, kernel, ": GEMM operands must be float32, got ",
                    t->scalar_type());
    }
    TORCH_CHECK(a.device() == b.device(), kernel, ": GEMM operands must be on one device");
    FFGemm g;
    if (batched) {
        TORCH_CHECK(a.dim() == 3 && b.dim() == 3, kernel, ": batched GEMM operands must be 3-D, got ", a.sizes(),
                    " and ", b.sizes());
        TORCH_CHECK(a.size(0) == b.size(0), kernel, ": batch sizes differ: ", a.sizes(), " and ", b.sizes());
    } else {
        TORCH_CHECK(a.dim() >= 2 && b.dim() == 2, kernel, ": GEMM operands of sizes ", a.sizes(), " and ",
                    b.sizes());
    }
    const torch::Tensor b_kn = b_is_nk ? b.transpose(-1, -2) : b;  // B as [.., K, N]
    g.k = a.size(-1);
    g.n = b_kn.size(-1);
    TORCH_CHECK(b_kn.size(-2) == g.k, kernel, ": inner dimensions differ: A ", a.sizes(), ", B ", b.sizes());
    g.out_sizes = a.sizes().vec();
    g.out_sizes.back() = g.n;
    g.a = ff_gemm_rows(batched ? a : a.reshape({-1, g.k}));
    g.b = ff_gemm_rows(b_kn.transpose(-1, -2));  // [.., N, K]
    g.batch = batched ? a.size(0) : 1;
    g.m = g.a.size(-2);
    g.lda = ff_gemm_ld(g.a);
    g.ldb = ff_gemm_ld(g.b);
    g.stride_a = batched && g.batch > 1 ? g.a.stride(0) : 0;
    g.stride_b = batched && g.batch > 1 ? g.b.stride(0) : 0;
    const int64_t kMax = (int64_t(1) << 31) - 1;
    TORCH_CHECK(g.m <= kMax && g.n <= kMax && g.k <= kMax && g.lda <= kMax && g.ldb <= kMax,
                kernel, ": GEMM sizes beyond 32-bit indexing (M ", g.m, ", N ", g.n, ", K ", g.k, ")");
    TORCH_CHECK(g.batch <= 65535, kernel, ": batch ", g.batch, " > 65535 (one grid z per batch)");
    return g;
}

enum FFGemmClass { FF_GEMM_FULL = 0, FF_GEMM_ROW = 1, FF_GEMM_COL = 2, FF_GEMM_SCALAR = 3 };

static torch::Tensor ff_gemm_operand(const char* kernel, const char* name, const torch::Tensor& t, const FFGemm& g,
                                     int cls) {
    TORCH_CHECK(t.is_cuda(), kernel, ": ", name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == torch::kFloat, kernel, ": ", name, " must be float32, got ", t.scalar_type());
    TORCH_CHECK(t.device() == g.a.device(), kernel, ": inputs must be on one device");
    if (cls == FF_GEMM_FULL) TORCH_CHECK(t.sizes().vec() == g.out_sizes, kernel, ": ", name, " has sizes ", t.sizes(),
                                         ", expected the GEMM's output sizes ", g.out_sizes);
    if (cls == FF_GEMM_ROW) TORCH_CHECK(t.numel() == g.batch * g.m, kernel, ": ", name, " needs one value per row");
    if (cls == FF_GEMM_COL) TORCH_CHECK(t.numel() == g.n, kernel, ": ", name, " needs one value per column");
    if (cls == FF_GEMM_SCALAR) TORCH_CHECK(t.numel() == 1, kernel, ": ", name, " must hold one value");
    return t.contiguous();
}
