"""GEMM kernels: a linear, addmm, mm, matmul (2-D) or bmm in float32 with the pointwise chain after it, as one
3xTF32 tensor-core GEMM whose epilogue computes the chain per output element.

- `group.py`: recognise a GEMM, and how its group grows (the epilogue's operand classes);
- `kernel.py`: the generated epilogue functor, launcher and binding of one group;
- `runtime.py`: the fixed C++ (the lab's 3xTF32 GEMM, operand preparation in the binding).
"""

from __future__ import annotations

from ...cost import nbytes
from ...plan import KernelGroup, Runtime
from ...rates import (
    BANDWIDTH,
    GEMM3X_FLOPS,
    GEMM3X_MARGIN,
    GEMM3X_TILE,
    LAUNCH_S,
    SGEMM_FLOPS,
    SMS,
    gemm3x_seconds,
)
from ...words import with_article
from ..base import RUN_ON_GPU, FamilyBase
from .group import form_gemm_groups, gemm_op_reason, is_gemm_op, traced_sizes
from .kernel import gemm_kernel_source
from .runtime import GEMM_BINDING_RUNTIME, GEMM_CUDA_FLAGS, GEMM_VARIANT, VARIANT_NAMES, gemm_kernel_runtime


class Gemm(FamilyBase):
    name = "gemm"
    summary = ("float32 linear/addmm/mm/matmul/bmm with the pointwise chain after them as one 3xTF32 tensor-core "
               "GEMM kernel with a fused epilogue (sm_90a), where it is expected faster than cuBLAS")
    order = 2
    notes_stand = True  # it claims first; later families do not restate the edges of its groups

    def claim(self, claim, pointwise_groups, not_fused):
        return form_gemm_groups(claim, pointwise_groups, not_fused)

    def describe(self, group: KernelGroup) -> list[str]:
        m = group.spec
        alpha = f"{m.gemm.alpha!r} * " if m.gemm.alpha != 1.0 else ""
        beta = f"{m.gemm.beta!r} * " if m.gemm.beta != 1.0 else ""
        bias = f" + {beta}{m.gemm.bias} (bias)" if m.gemm.bias else ""
        return [f"    gemm kernel: {m.gemm.op} {m.gemm.layout} ({alpha}{m.gemm.a} @ {m.gemm.b}{bias}) -> "
                f"{list(group.shape)}{' batched' if m.gemm.batched else ''}, epilogue of "
                f"{len(group.nodes) - 1} pointwise ops",
                f"    reads {', '.join([m.gemm.a + ' (A)', m.gemm.b + ' (B)'] + [f'{i} ({k})' for i, k in m.operands])}; "
                f"writes {', '.join(group.outputs)}"]

    def source(self, group: KernelGroup, by_name):
        return gemm_kernel_source(group, by_name)

    def runtime(self) -> Runtime:
        return Runtime((gemm_kernel_runtime(),), (GEMM_BINDING_RUNTIME,), GEMM_CUDA_FLAGS)

    def check_operands(self, group: KernelGroup, inputs: dict) -> None:
        """A and B multiply, each epilogue input fits its class (the GEMM and its epilogue then run as the
        graph's own ops, in float64)."""
        g = group.spec.gemm
        a, b = inputs[g.a], inputs[g.b]
        b_kn = b.transpose(-1, -2) if g.op == "linear" else b
        if a.dim() < 2 or b_kn.dim() != (3 if g.batched else 2) or b_kn.shape[-2] != a.shape[-1]:
            raise ValueError(f"{group.name}: GEMM operands {g.a} {list(a.shape)} and {g.b} {list(b.shape)} do not multiply")
        out = [*a.shape[:-1], b_kn.shape[-1]]
        expected = {"row": a.numel() // max(1, a.shape[-1]), "col": out[-1], "scalar": 1}
        for name, cls in group.spec.operands:
            t = inputs[name]
            if not (list(t.shape) == out if cls == "full" else t.numel() == expected[cls]):
                raise ValueError(f"{group.name}: input {name} of shape {list(t.shape)} is not {cls} for output {out}")

    def call_comment(self, group: KernelGroup) -> str:
        return f"one GEMM kernel (3xTF32 {group.spec.gemm.layout}, epilogue fused)"

    def why_torch(self, node, on: bool) -> str | None:
        if not is_gemm_op(node):
            return None
        if not on:
            return ("GEMM/convolution anchor: kept as the cuBLAS/cuDNN call eager makes (GEMM kernels turned off, "
                    f"`{self.flag}`).")
        reason = gemm_op_reason(node)
        return "GEMM kept as the cuBLAS call eager makes: it is no GEMM kernel" + (f" ({reason})." if reason else ".")

    def replaced(self, group: KernelGroup) -> tuple[str, str]:
        return "GEMM kernel", (
            f"{with_article(group.spec.gemm.op)} runs on the tensor cores in 3xTF32 (fp32-class) and its "
            f"{len(group.nodes) - 1} pointwise ops run on the accumulator before the one store, so the product is "
            "never written and read back; it reads ")

    def holds(self, group: KernelGroup) -> str:
        return "GEMMs with the pointwise ops after them"

    def how(self) -> list[str]:
        return [
            f"GEMM kernels (family `{self.name}`) are the 3xTF32 GEMM of `families/gemm/gemm_3xtf32.cu` ("
            "taken verbatim into `30_kernels/kernels.cu`) with a generated epilogue functor. Precision: each fp32 "
            "operand value x is split into two TF32 values, a big part (x rounded to TF32 for A; B's own value, which "
            "the tensor core truncates to TF32) and the small remainder, split so that the error of big + small "
            "is unbiased, and a_small·b_big + a_big·b_small + a_big·b_big is accumulated on the tensor cores in fp32 "
            "(the small·small term, below 2^-21 relative, is dropped). The tensor core's own accumulation rounds "
            "toward zero, so every 2 k-tiles of 32 start from a fresh accumulator, added to the running sum with an "
            "ordinary round-to-nearest fp32 add, and each such chain takes the small products first and the big ones "
            "last (fewer roundings of a large sum: a bias that a mean over rows, such as train-mode BatchNorm's, "
            "would keep). Measured on an H100 at 1024x8192x8192: relative error 2.9e-7 vs float64, against cuBLAS "
            "SGEMM's 1.6e-6 (fp32-class, DESIGN §3). Tiling: 128 × 128 output tiles, 32-wide k-tiles, one "
            "persistent block per multiprocessor looping over the tiles, with two warpgroups on the tensor cores, "
            "one thread issuing TMA loads of each k-tile (zero-filled past the edges, so any M, N, K works; 16-byte "
            "aligned rows, else bounds-checked cp.async copies) and six warps splitting B; stores are bounds-checked "
            "(8-byte when C's rows allow). The kernel reads B as [N, K] rows (`x @ W.T`, or a transposed operand, "
            "as it is); an NN product's B ([K, N] rows, chosen from the traced strides) is copied to [N, K] rows by "
            "the binding (its cost is in the time model that picks the kernel over cuBLAS), which also copies an "
            f"operand whose rows are not unit-stride. Kernel variant {GEMM_VARIANT} ({VARIANT_NAMES[GEMM_VARIANT]}; "
            "the constant `kFFGemmVariant` in the generated source: 0 mma.sync, 1 wgmma, 2 warp-specialised wgmma). "
            "Measured in the lab on an H100 at 1024x8192x8192: 57.3, 75.7 and 135.8 TFLOP/s for variants 0, 1 and 2 "
            "(cuBLAS SGEMM about 50); all three passed the lab's full sweep (ragged, NN, batched), and all three "
            "the GPU tests on odd shapes against float64. The epilogue runs per output element on the accumulator (bias, "
            "per-row and per-column vectors, scalars, full-shape inputs such as a residual are read through the "
            "read-only cache); extra outputs are written by the functor. Built for sm_90a (H100/H200) only. "
            + RUN_ON_GPU,
            "",
        ]

    def call_shape(self, group: KernelGroup) -> str:
        m = group.spec.gemm
        return (f"{m.op} {m.layout} of {m.a} (A) and {m.b} (B) -> {list(group.shape)}"
                + (f", epilogue reads {', '.join(f'{i} ({c})' for i, c in group.spec.operands)}"
                   if group.spec.operands else ""))

    def expected(self) -> list[str]:
        return [f"- GEMM kernels are costed in whole waves of {GEMM3X_TILE} x {GEMM3X_TILE} tiles over {SMS} SMs, "
                f"at {GEMM3X_FLOPS / 1e12:.1f} TFLOP/s per full wave (the lab's variant-2 measurement at "
                "1024x8192x8192 on an H100; variants 0 and 1 run slower), eager's GEMMs at cuBLAS SGEMM's "
                f"{SGEMM_FLOPS / 1e12:.0f}; a product that our kernel is not expected to run {GEMM3X_MARGIN}x faster "
                "than cuBLAS (few tiles over a long K, which cuBLAS splits) stays a cuBLAS call."]

    def seconds(self, group: KernelGroup, by_name) -> float | None:
        """Our kernel's measured rate in whole waves of tiles (the epilogue's FLOPs are negligible)."""
        moved = sum(nbytes(by_name[i]) for i in group.inputs) + sum(nbytes(by_name[o]) for o in group.outputs)
        sizes = traced_sizes(by_name[group.spec.anchor], by_name[group.spec.gemm.a])
        ours = gemm3x_seconds(*sizes, copies_b=not group.spec.gemm.b_transposed)
        return max(ours, moved / BANDWIDTH) + LAUNCH_S


FAMILY = Gemm()
