"""Channel-norm kernels: a train-mode batch norm or a group norm with the pointwise ops around it that have its
input's shape, as a pair of kernels: prologue -> per-channel statistics, then finalise + running statistics +
normalise + epilogue.

- `table.py`: the channel-norm table (recognise, C++ spelling of the results, float64 reference);
- `group.py`: how a channel group grows around its norm (operand classes, per-channel members);
- `kernel.py`: the generated Op struct, launchers and binding of one group;
- `runtime.py`, `nhwc_runtime.py`: the fixed C++ of the statistics and normalise kernels (NCHW, and NHWC
  for a channels-last input) and of the binding's checks.
"""

from __future__ import annotations

from ...cost import nbytes
from ...plan import KernelGroup, Runtime
from ...rates import BANDWIDTH, LAUNCH_S
from ...words import with_article
from ..base import FamilyBase
from . import table
from .group import WARP_UNIT, channel_op_reason, form_channel_groups
from .kernel import channel_kernel_source
from .nhwc_runtime import CHANNEL_NHWC_KERNEL_RUNTIME
from .runtime import CHANNEL_BINDING_RUNTIME, CHANNEL_KERNEL_RUNTIME, CHANNEL_TYPES


class ChannelNorms(FamilyBase):
    name = "channel_norms"
    summary = ("train-mode batch norm (statistics per channel, running-statistics update, normalise) and group "
               "norm with their pointwise neighbours, as a pair of kernels")
    order = 1

    def claim(self, claim, pointwise_groups, not_fused):
        return form_channel_groups(claim, pointwise_groups, not_fused)

    def describe(self, group: KernelGroup) -> list[str]:
        c = group.spec
        per_channel = f"; one value per channel: {', '.join(c.channel_nodes)}" if c.channel_nodes else ""
        unit = "one sample's group of channels" if c.norm.groups else "every axis but axis 1"
        return [f"    channel kernels: {c.norm.describe} of {c.norm.data} over {unit} of "
                f"{list(group.shape)} (statistics, then normalise){per_channel}",
                f"    reads {', '.join(f'{i} ({k})' for i, k in c.operands)}; writes {', '.join(group.outputs)}"]

    def source(self, group: KernelGroup, by_name):
        return channel_kernel_source(group, by_name)

    def runtime(self) -> Runtime:
        return Runtime((CHANNEL_TYPES, CHANNEL_KERNEL_RUNTIME, CHANNEL_NHWC_KERNEL_RUNTIME),
                       (CHANNEL_TYPES, CHANNEL_BINDING_RUNTIME))

    def check_operands(self, group: KernelGroup, inputs: dict) -> None:
        """Each input fits the class it is read as (what the binding checks)."""
        full = [inputs[i] for i, c in group.spec.operands if c == "full"]
        if not full or full[0].dim() < 2:
            raise ValueError(f"{group.name}: no full-shape input of rank >= 2")
        sizes = full[0].shape
        for name, cls in group.spec.operands:
            t = inputs[name]
            ok = t.shape == sizes if cls == "full" else t.numel() == (sizes[1] if cls == "channel" else 1)
            if ok and cls == "channel" and t.dim() > 1:  # such as [C, 1, 1]: C must land on axis 1
                ok = t.dim() <= len(sizes) and ([1] * (len(sizes) - t.dim()) + list(t.shape))[1] == sizes[1]
            if not ok:
                raise ValueError(f"{group.name}: input {name} of shape {list(t.shape)} is not {cls} for {list(sizes)}")

    def references(self, group: KernelGroup) -> dict:
        norm = group.spec.norm
        return {group.spec.anchor: lambda local: table.reference(norm, local[norm.data],
                                                                 {p: local[p] for p in norm.params})}

    def call_comment(self, group: KernelGroup) -> str:
        return f"channel kernels ({group.spec.norm.describe}: statistics, then normalise)"

    def why_torch(self, node, on: bool) -> str | None:
        if not (on and table.is_channel_op(node)):
            return None
        reason = channel_op_reason(node)
        return ("batch norm kept as PyTorch's kernel: it is no channel kernel"
                + (f" ({reason})." if reason else " (its neighbours could not join it; see below)."))

    def replaced(self, group: KernelGroup) -> tuple[str, str]:
        launches = ("one launch with an NCHW input (a warp per unit: statistics, normalise and the fused ops)"
                    if group.spec.warp_units
                    else "two launches (statistics, then running statistics + normalise + the fused ops)")
        return "channel kernels", (f"{with_article(group.spec.norm.describe)} is memory-bound: {launches} instead of "
                                   "eager's norm kernels and a pass per pointwise op")

    def launches(self, group: KernelGroup) -> int:
        return group.spec.launches

    def fusion(self, group: KernelGroup, ops: str, count: int, saved: str) -> str | None:
        launches, reads = (("one launch", "once") if group.spec.warp_units else ("two launches", "twice"))
        return (f"- `{group.name}` ({count} ops): {launches} instead of eager's norm kernels and one launch per "
                f"pointwise op, and about {saved} less traffic per call: the normalised value and other "
                f"intermediates stay in registers; the full-shape inputs are read {reads}.")

    def how(self) -> list[str]:
        return self._how({False, True})

    def how_for(self, groups: list[KernelGroup]) -> list[str]:
        return self._how({g.spec.warp_units for g in groups})

    @staticmethod
    def _how(forms: set[bool]) -> list[str]:
        """The pair's common line, then a line per form used (True: a warp per unit, one launch)."""
        lines = ["Channel kernels: Welford statistics per unit (a channel over the batch, or a sample's group of "
                 "channels), merged in a fixed order (the same result every run), then running statistics, normalise "
                 "and the fused ops."]
        if False in forms:
            lines.append(f"Units of more than {WARP_UNIT} values: launch 1 writes partial statistics per (unit, part); "
                         "launch 2 merges them and normalises.")
        if True in forms:
            lines.append(f"Units of at most {WARP_UNIT} values: one launch, a warp per unit, each lane keeping its "
                         "values in registers from the statistics to the normalised ops (a channels-last input takes "
                         "the NHWC kernels' three launches).")
        return lines

    def call_shape(self, group: KernelGroup) -> str:
        c = group.spec
        return (f"{c.norm.describe} of {c.norm.data} over {list(group.shape)}; reads "
                + ", ".join(f"{i} ({k})" for i, k in c.operands))

    def seconds(self, group: KernelGroup, by_name) -> float:
        """Memory-bound: the full-shape inputs read once per pass and everything else once, at the bandwidth, plus a
        launch per pass. Two passes (statistics, then normalise: channel.cu's plane, column and NHWC kernels); one
        where a unit (a channel, or a sample's group) has at most WARP_UNIT values, which a warp keeps in registers
        (ff_chan_warp_units), priced as if its input were NCHW (a channels-last one takes the two-pass NHWC kernels:
        a small unit and a channels-last convolution before it are rare enough to leave unpriced)."""
        full = sum(nbytes(by_name[i]) for i, c in group.spec.operands if c == "full")
        rest = sum(nbytes(by_name[i]) for i in group.inputs) - full + sum(nbytes(by_name[o]) for o in group.outputs)
        passes = group.spec.launches
        return (passes * full + rest) / BANDWIDTH + passes * LAUNCH_S

    def reads_channels_last(self, group: KernelGroup, value: str, by_name) -> bool:
        """Its one full-shape input, read by the NHWC kernels."""
        return [i for i, c in group.spec.operands if c == "full"] == [value]


FAMILY = ChannelNorms()
