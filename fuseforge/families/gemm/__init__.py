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
    LAUNCH_S,
    SGEMM_FLOPS,
    gemm3x_seconds,
)
from ...words import counted, with_article
from ..base import FamilyBase
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
        chain = len(group.nodes) - 1
        epilogue = (f", its {counted(chain, 'pointwise op')} applied to the accumulator before the one store, so the "
                    "product is never written and read back" if chain else "")
        return "GEMM kernel", (f"{with_article(group.spec.gemm.op)} on the tensor cores in 3xTF32 (fp32-class; "
                               f"expected faster than cuBLAS SGEMM at this size){epilogue}")

    def how(self) -> list[str]:
        return [f"GEMM kernels: the 3xTF32 GEMM of `families/gemm/gemm_3xtf32.cu` (variant {GEMM_VARIANT}, "
                f"{VARIANT_NAMES[GEMM_VARIANT]}); a generated epilogue functor applies the fused ops to the "
                "accumulator before the store."]

    def call_shape(self, group: KernelGroup) -> str:
        m = group.spec.gemm
        return (f"{m.op} {m.layout} of {m.a} (A) and {m.b} (B) -> {list(group.shape)}"
                + (f", epilogue reads {', '.join(f'{i} ({c})' for i, c in group.spec.operands)}"
                   if group.spec.operands else ""))

    def expected(self) -> list[str]:
        return [f"GEMM kernels run at up to {GEMM3X_FLOPS / 1e12:.1f} TFLOP/s (3xTF32, measured on an H100), "
                f"cuBLAS SGEMM at {SGEMM_FLOPS / 1e12:.0f}"]

    def seconds(self, group: KernelGroup, by_name) -> float | None:
        """Our kernel's measured rate in whole waves of tiles (the epilogue's FLOPs are negligible)."""
        moved = sum(nbytes(by_name[i]) for i in group.inputs) + sum(nbytes(by_name[o]) for o in group.outputs)
        sizes = traced_sizes(by_name[group.spec.anchor], by_name[group.spec.gemm.a])
        ours = gemm3x_seconds(*sizes, copies_b=not group.spec.gemm.b_transposed)
        return max(ours, moved / BANDWIDTH) + LAUNCH_S


FAMILY = Gemm()
