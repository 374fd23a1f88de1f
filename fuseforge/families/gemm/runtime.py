"""Fixed C++ of the GEMM kernels: the 3xTF32 GEMM (kernel unit) and operand preparation (binding unit, `binding.h`).

The kernel unit takes `gemm_3xtf32.cu` of this folder (the one copy of the GEMM; the lab's benches in
`dev/kernels/` build it from here), read at codegen time: everything up to the end of its `gemm3x` namespace
(kernels, tiling constants, the `gemm3x::launch<kBKMajor>` launcher that picks TMA, 16-byte or 4-byte
copies), not its C launchers. Each
GEMM group adds an epilogue functor and a launcher that calls `gemm3x::launch` with it
(`kernel.py`). The kernel variant is the named constant `kFFGemmVariant` in the generated
source (0 mma.sync, 1 wgmma, 2 warp-specialised wgmma; `GEMM_VARIANT` here); the launcher sets it before
every launch. Variants 1 and 2 use sm_90a instructions, and all three are instantiated by the lab's
launcher, so an extension with GEMM kernels is built for sm_90a only (`GEMM_CUDA_FLAGS`: H100/H200).
"""

from __future__ import annotations

import hashlib
from importlib.resources import files

from ...cuda_sources import cuda_source

GEMM_FILE = "gemm_3xtf32.cu"
LAB_END = "}  // namespace gemm3x"
GEMM_VARIANT = 2  # 0: mma.sync, 1: wgmma, 2: warp-specialised wgmma (the fastest; all three ran the full sweep)
VARIANT_NAMES = {0: "mma.sync m16n8k8", 1: "wgmma m64n128k8 (sm_90a)",
                 2: "warp-specialised wgmma with A from registers (sm_90a)"}
GEMM_CUDA_FLAGS = ("-gencode=arch=compute_90a,code=sm_90a",)


class LabFileMissing(RuntimeError):
    """The GEMM kernels are generated from `gemm_3xtf32.cu`, which the installed package lacks or cannot split."""


def lab_source() -> str:
    """`gemm_3xtf32.cu` up to the end of its `gemm3x` namespace."""
    path = files(__package__).joinpath(GEMM_FILE)
    if not path.is_file():
        raise LabFileMissing(f"the gemm family needs {path} (the 3xTF32 GEMM, read at codegen time)")
    text = cuda_source(__package__, GEMM_FILE)
    end = text.find(LAB_END)
    if end < 0:
        raise LabFileMissing(f"{path} has no line '{LAB_END}': cannot tell its kernels from its C launchers")
    return text[: end + len(LAB_END)] + "\n"


def gemm_kernel_runtime(variant: int = GEMM_VARIANT) -> str:
    lab = lab_source()
    digest = hashlib.sha256(lab.encode()).hexdigest()[:12]
    return "\n".join([
        "// ---- 3xTF32 GEMM: fuseforge/families/gemm/gemm_3xtf32.cu verbatim up to the end of namespace gemm3x "
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


GEMM_BINDING_RUNTIME = cuda_source(__package__, "binding.h")
