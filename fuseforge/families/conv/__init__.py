"""Conv kernels: a 2-D or 3-D convolution with short dot products (few input channels, a small window) and the
pointwise chain after it, as one direct fp32 convolution kernel whose epilogue computes the chain.

- `group.py`: recognise such a convolution, and how its group grows (the epilogue's operand classes);
- `tiling.py`: how the kernel tiles one convolution (a rule of its channels, window and output extents);
- `kernel.py`: the generated epilogue functor, launcher and binding of one group;
- `reference.py`: the float64 reference of the convolution from the plan's geometry;
- `direct.cuh`: the kernel (exact fp32 FFMA, weights and double-buffered input tiles in shared memory);
- `binding.h`: the binding's checks and output sizes.
"""

from __future__ import annotations

from ...cost import nbytes
from ...cuda_sources import cuda_source
from ...plan import KernelGroup, Runtime
from ...rates import BANDWIDTH, CONV_DIRECT_FLOPS, CUDNN_SHORT_DOT_FLOPS, LAUNCH_S
from ...words import counted, with_article
from ..base import FamilyBase
from .group import conv_op_reason, direct_seconds, form_conv_groups, is_conv_op
from .kernel import conv_kernel_source
from .reference import direct_conv

DIRECT_KERNEL = cuda_source(__package__, "direct.cuh")  # the kernel and its launch template
CONV_BINDING = cuda_source(__package__, "binding.h")  # the binding's checks and output sizes


class Conv(FamilyBase):
    name = "conv"
    summary = ("2-D/3-D convolutions with few input channels and a small window, with the pointwise chain after "
               "them, as one direct fp32 convolution kernel with a fused epilogue")
    order = 4

    def claim(self, claim, pointwise_groups, not_fused):
        return form_conv_groups(claim, pointwise_groups, not_fused)

    def describe(self, group: KernelGroup) -> list[str]:
        c = group.spec.conv
        t = c.tiling
        bias = f" + {c.bias} (bias)" if c.bias else ""
        return [f"    conv kernel: {c.op} ({c.x} * {c.w}{bias}) -> {list(group.shape)}, {c.geometry_text()}; direct "
                f"fp32, {t.kpt} channels x {t.ph} rows a thread, {t.wk} x {t.wh} warps; epilogue of "
                f"{len(group.nodes) - 1} pointwise ops",
                f"    reads {', '.join([c.x + ' (input)', c.w + ' (weight)'] + [f'{i} ({k})' for i, k in group.spec.operands])}; "
                f"writes {', '.join(group.outputs)}"]

    def source(self, group: KernelGroup, by_name):
        return conv_kernel_source(group, by_name)

    def runtime(self) -> Runtime:
        return Runtime((DIRECT_KERNEL,), (CONV_BINDING,))

    def check_operands(self, group: KernelGroup, inputs: dict) -> None:
        """The input and weight have the channels and window the kernel was generated for; each epilogue input
        fits its class against the output they make (what the binding checks)."""
        c = group.spec.conv
        x, w = inputs[c.x], inputs[c.w]
        window = tuple(w.shape[2:])
        if x.dim() != c.dims + 2 or x.shape[1] != c.c or tuple(w.shape[:2]) != (c.k, c.c) or \
                window != c.window[3 - c.dims:]:
            raise ValueError(f"{group.name}: convolution of {list(x.shape)} by {list(w.shape)} is not the "
                             f"{c.c} -> {c.k} channels and window it was generated for")
        out = [x.shape[0], c.k] + [(size + 2 * p - d * (k - 1) - 1) // s + 1 for size, k, s, p, d in
                                   zip(x.shape[2:], *(t[3 - c.dims:] for t in (c.window, c.stride, c.padding,
                                                                                 c.dilation)))]
        for name, cls in group.spec.operands:
            t = inputs[name]
            if cls == "full":
                ok = list(t.shape) == out
            elif cls == "channel":
                ok = t.numel() == c.k and (t.dim() <= 1 or ([1] * (len(out) - t.dim()) + list(t.shape))[1] == c.k)
            else:
                ok = t.numel() == 1
            if not ok:
                raise ValueError(f"{group.name}: input {name} of shape {list(t.shape)} is not {cls} for output {out}")

    def references(self, group: KernelGroup) -> dict:
        c = group.spec.conv

        def convolved(local):
            return direct_conv(c, local[c.x], local[c.w], local[c.bias] if c.bias else None)

        return {group.spec.anchor: convolved}

    def call_comment(self, group: KernelGroup) -> str:
        return "one conv kernel (direct fp32, epilogue fused)"

    def why_torch(self, node, on: bool) -> str | None:
        if not is_conv_op(node):
            return None
        if not on:
            return f"convolution kept as the cuDNN call eager makes (conv kernels turned off, `{self.flag}`)."
        reason = conv_op_reason(node)
        return "convolution kept as the cuDNN call eager makes: it is no conv kernel" + (f" ({reason})." if reason else ".")

    def replaced(self, group: KernelGroup) -> tuple[str, str]:
        chain = len(group.nodes) - 1
        epilogue = (f", its {counted(chain, 'pointwise op')} applied to each value before the one store, so the "
                    "convolution's output is never written and read back" if chain else "")
        return "conv kernel", (f"{with_article(group.spec.conv.op)} with short dot products "
                               f"({group.spec.conv.terms} products an output) as exact-fp32 FFMAs, expected faster "
                               f"than cuDNN at this size{epilogue}")

    def how(self) -> list[str]:
        return ["Conv kernels: each thread sums 8 output channels x up to 8 rows of one column in fp32 registers, "
                "from the weights and a double-buffered input tile in shared memory; a generated epilogue functor "
                "applies the fused ops before the one store (`families/conv/direct.cuh`)."]

    def call_shape(self, group: KernelGroup) -> str:
        c = group.spec.conv
        return (f"{c.op} of {c.x} by {c.w} -> {list(group.shape)} ({c.geometry_text()})"
                + (f", epilogue reads {', '.join(f'{i} ({k})' for i, k in group.spec.operands)}"
                   if group.spec.operands else ""))

    def expected(self) -> list[str]:
        return [f"conv kernels run at {CONV_DIRECT_FLOPS[2] / 1e12:.0f} TFLOP/s in 2-D and "
                f"{CONV_DIRECT_FLOPS[3] / 1e12:.0f} in 3-D (direct fp32, measured on an H100) where cuDNN ran such "
                f"convolutions at {CUDNN_SHORT_DOT_FLOPS[2] / 1e12:.0f} and {CUDNN_SHORT_DOT_FLOPS[3] / 1e12:.0f}"]

    def seconds(self, group: KernelGroup, by_name) -> float | None:
        """The kernel's measured rate with its tiles' tails, or its traffic where that takes longer."""
        moved = sum(nbytes(by_name[i]) for i in group.inputs) + sum(nbytes(by_name[o]) for o in group.outputs)
        return max(direct_seconds(by_name[group.spec.anchor], group.spec.conv), moved / BANDWIDTH) + LAUNCH_S


FAMILY = Conv()
