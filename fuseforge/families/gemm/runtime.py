"""Fixed C++ of the GEMM kernels: the lab's 3xTF32 GEMM (kernel unit) and operand preparation (binding unit).

The kernel unit takes `dev/kernels/gemm_3xtf32.cu` itself, read at codegen time (the lab file stays the one
copy of the GEMM): everything up to the end of its `gemm3x` namespace (kernels, tiling constants, the
`gemm3x::launch<kBKMajor>` launcher that picks TMA, 16-byte or 4-byte copies), not its C launchers. Each
GEMM group adds an epilogue functor and a launcher that calls `gemm3x::launch` with it
(`kernel.py`). The kernel variant is the named constant `kFFGemmVariant` in the generated
source (0 mma.sync, 1 wgmma, 2 warp-specialised wgmma; `GEMM_VARIANT` here); the launcher sets it before
every launch. Variants 1 and 2 use sm_90a instructions, and all three are instantiated by the lab's
launcher, so an extension with GEMM kernels is built for sm_90a only (`GEMM_CUDA_FLAGS`: H100/H200).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

LAB_FILE = Path(__file__).resolve().parents[3] / "dev" / "kernels" / "gemm_3xtf32.cu"
LAB_END = "}  // namespace gemm3x"
GEMM_VARIANT = 2  # 0: mma.sync, 1: wgmma, 2: warp-specialised wgmma (the fastest; all three ran the full sweep)
VARIANT_NAMES = {0: "mma.sync m16n8k8", 1: "wgmma m64n128k8 (sm_90a)",
                 2: "warp-specialised wgmma with A from registers (sm_90a)"}
GEMM_CUDA_FLAGS = ("-gencode=arch=compute_90a,code=sm_90a",)


class LabFileMissing(RuntimeError):
    """The GEMM kernels are generated from the lab file, which is not where fuseforge expects it."""


def lab_source(path: Path = LAB_FILE) -> str:
    """The lab file up to the end of its `gemm3x` namespace."""
    if not path.exists():
        raise LabFileMissing(f"--gemm-kernels needs {path} (the 3xTF32 GEMM lab file, read at codegen time)")
    text = path.read_text()
    end = text.find(LAB_END)
    if end < 0:
        raise LabFileMissing(f"{path} has no line '{LAB_END}': cannot tell its kernels from its C launchers")
    return text[: end + len(LAB_END)] + "\n"


def gemm_kernel_runtime(variant: int = GEMM_VARIANT) -> str:
    lab = lab_source()
    digest = hashlib.sha256(lab.encode()).hexdigest()[:12]
    return "\n".join([
        "// ---- 3xTF32 GEMM: dev/kernels/gemm_3xtf32.cu verbatim up to the end of namespace gemm3x "
        f"(sha256 {digest}).",
        lab,
        "// ---- GEMM kernels of this model: each group's epilogue functor runs on the fp32 accumulator of one",
        "// output element, inside the GEMM kernel's bounds-checked store loop (gemm3x::launch<true>: B as [N, K] rows).",
        f"// Kernel variant: 0 mma.sync, 1 wgmma, 2 warp-specialised wgmma (this build: {VARIANT_NAMES[variant]}).",
        f"constexpr int kFFGemmVariant = {variant};",
        "",
        "// B is read as [N, K] rows (TN: the binding copies an NN product's B to them).",
        "template <class Epilogue>",
        "int ff_gemm_launch(const float* a, const float* b, float* c, int64_t batch, int64_t m, int64_t n, int64_t k,"
        "                   int64_t lda, int64_t ldb, int64_t stride_a, int64_t stride_b, const Epilogue& epi,",
        "                   void* stream) {",
        "    gemm3x::variant() = kFFGemmVariant;  // process-wide in this extension; set before every launch",
        "    return (int)gemm3x::launch<true>(a, b, c, (int)m, (int)n, (int)k, (int)lda, (int)ldb, (int)n,",
        "                                          (int)batch, (long long)stride_a, (long long)stride_b,",
        "                                          (long long)(m * n), epi, stream);",
        "}",
        "",
    ])


GEMM_BINDING_RUNTIME = r"""
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
"""
