"""Row kernels: a reduction or normalisation over the trailing axes (softmax, log_softmax, logsumexp, layer_norm,
mean, sum, amax, amin), or softmax, log_softmax, logsumexp over the channel axis, with the pointwise ops
around it, as one kernel: prologue -> row statistics -> epilogue, one launch.

- `table.py`: the row-reduction table (recognise, C++ spelling, float64 reference, `ROW_STATS`);
- `group.py`: how a row group grows around its reduction (operand classes, per-row members);
- `kernel.py`: the generated Op struct, launcher and binding of one group;
- `runtime.py`: the fixed C++ of the row paths and of the binding's operand checks.
"""

from __future__ import annotations

import math

from ...plan import KernelGroup, Runtime
from ...pointwise import op_key
from ...words import with_article
from ..base import FamilyBase
from . import table
from .group import broadcasts, form_row_groups, per_row_shapes
from .kernel import row_kernel_source
from .runtime import ROW_BINDING_RUNTIME, ROW_KERNEL_RUNTIME

NHWC_MAX_CHANNELS = 256  # kFFRowNhwcMaxChannels of rows_binding.h: past it the binding reads a contiguous copy
_REDUCTION_KEYS = ("norm", "softmax", "logsumexp", "sum", "mean", "amax", "min", "max", "pool")


class Rows(FamilyBase):
    name = "rows"
    summary = ("softmax, log_softmax, logsumexp, layer norm, sum/mean/amax/amin, var/std and the 1- and 2-norm over the "
               "trailing axes "
               "(softmax, log_softmax and logsumexp also over the channel axis) with their pointwise "
               "neighbours, as one row kernel")
    order = 0

    def claim(self, claim, pointwise_groups, not_fused):
        return form_row_groups(claim, pointwise_groups, not_fused)

    def not_pointwise_note(self, node) -> str | None:
        reason = table.row_op_reason(node) if table.is_row_op(node) else None
        return f"a row kernel: {reason}" if reason else None

    def describe(self, group: KernelGroup) -> list[str]:
        r = group.spec
        per_row = f"; one value per row: {', '.join(r.row_nodes)}" if r.row_nodes else ""
        return [f"    row kernel: {r.reduction.op} of {r.reduction.data} {r.reduction.over} of "
                f"{list(group.shape)}{per_row}",
                f"    reads {', '.join(f'{i} ({c})' for i, c in r.operands)}; writes {', '.join(group.outputs)}"]

    def source(self, group: KernelGroup, by_name):
        return row_kernel_source(group, by_name)

    def runtime(self) -> Runtime:
        return Runtime((table.ROW_STATS, ROW_KERNEL_RUNTIME), (ROW_BINDING_RUNTIME,))

    def check_operands(self, group: KernelGroup, inputs: dict) -> None:
        """Each input fits the class it is read as (broadcast as torch does)."""
        spec = group.spec
        full = [inputs[i] for i, c in spec.operands if c == "full"]
        if not full:
            raise ValueError(f"{group.name}: no full-shape input")
        sizes = list(full[0].shape)
        red = spec.reduction
        reduced = red.reduced(len(sizes))
        kept, lead = per_row_shapes(tuple(sizes), reduced)
        for name, cls in spec.operands:
            t = list(inputs[name].shape)
            padded = [1] * (len(sizes) - len(t)) + t
            if cls == "full":
                ok = t == sizes
            elif cls == "scalar":
                ok = math.prod(t) == 1
            elif cls == "col":
                ok = broadcasts(t, sizes) and all(d == 1 for a, d in enumerate(padded) if a not in reduced)
            else:
                ok = broadcasts(t, kept if cls == "row" else lead)
            if not ok:
                raise ValueError(f"{group.name}: input {name} of shape {t} is not {cls} for rows {red.over} of {sizes}")

    def references(self, group: KernelGroup) -> dict:
        red = group.spec.reduction
        return {group.spec.anchor: lambda local: table.reference(red, local[red.data],
                                                                 {p: local[p] for p in red.params if p})}

    def call_comment(self, group: KernelGroup) -> str:
        return f"one row kernel ({group.spec.reduction.op} {group.spec.reduction.over})"

    def why_torch(self, node, on: bool) -> str | None:
        if not any(k in op_key(node) for k in _REDUCTION_KEYS):
            return None
        if not on:
            return ("reduction or normalisation anchor: kept as PyTorch's kernel (row kernels turned off, "
                    f"`{self.flag}`).")
        reason = table.row_op_reason(node) if table.is_row_op(node) else None
        return ("reduction or normalisation anchor: kept as PyTorch's kernel; row kernels cover softmax, "
                "log_softmax, logsumexp, layer_norm, mean, sum, amax, amin, var, std and vector norms of order 1 or 2 "
                "over the last axis, or over the "
                "last k axes together, and softmax, log_softmax and logsumexp over the channel axis"
                + (f" ({reason})." if reason else "."))

    def replaced(self, group: KernelGroup) -> tuple[str, str]:
        red = group.spec.reduction
        return "row kernel", (f"{with_article(red.op)} {red.over} is memory-bound: one launch reads each row once and "
                              "computes its statistics and the fused ops in registers")

    def how(self) -> list[str]:
        return ["Row kernels: a warp per row up to 1024 values, a block per row up to 16384, two passes beyond; "
                "online max and sum of exponentials, Welford or fp32 sums merged by warp shuffles; the inputs stay "
                "in registers for the fused ops."]

    def reads_channels_last(self, group: KernelGroup, value: str, by_name) -> bool:
        """Rows along the channel axis whose one full input is `value`, of at most NHWC_MAX_CHANNELS channels: the
        kernel reads a channels-last input through a shared-memory tile and writes NCHW (`rows.cu`)."""
        spec = group.spec
        full = [i for i, c in spec.operands if c == "full"]
        shape = by_name[value].meta["val"].shape
        return (spec.reduction.channels and full == [value] and len(shape) in (4, 5)
                and isinstance(shape[1], int) and shape[1] <= NHWC_MAX_CHANNELS)

    def call_shape(self, group: KernelGroup) -> str:
        red = group.spec.reduction
        return (f"rows of {list(group.shape)}, {red.op} of {red.data}; reads "
                + ", ".join(f"{i} ({c})" for i, c in group.spec.operands))


FAMILY = Rows()
