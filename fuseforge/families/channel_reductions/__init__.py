"""Channel-reduction kernels: an amin, amax, sum or mean over the channel axis of [N, C, *spatial], or a max or
average pool, with the pointwise ops around it, as one kernel (a pool with only pointwise ops after it is a
pool kernel).

- `table.py`: the channel-reduction table (recognise, C++ spelling, float64 reference);
- `pools.py`: the pool table (windows, divisor rule, C++ spelling, float64 reference);
- `group.py`: how a group grows around its reduction or pool (operand classes, reduced members);
- `kernel.py`: the generated Op struct, launcher and binding of one group;
- `runtime.py`: the fixed C++ of the reduction kernel and of the binding's checks.
"""

from __future__ import annotations

from ...plan import KernelGroup, Runtime
from ...words import with_article
from ..base import FamilyBase
from . import pools, table
from .group import channel_reduction_reason, form_channel_reduction_groups, pool_reason
from .kernel import channel_reduce_kernel_source
from .runtime import CHANNEL_REDUCE_BINDING_RUNTIME, CHANNEL_REDUCE_KERNEL_RUNTIME, CHANNEL_REDUCE_TYPES


def _what(group: KernelGroup) -> str:
    """`channel-reduction` or `pool` (a pool kernel: a pool and the pointwise ops after it)."""
    return "channel-reduction" if group.spec.reduction else "pool"


class ChannelReductions(FamilyBase):
    name = "channel_reductions"
    summary = ("amin/amax/sum/mean over the channel axis and max/avg pools with their pointwise neighbours, "
               "as one kernel")
    order = 3

    def claim(self, claim, pointwise_groups, not_fused):
        return form_channel_reduction_groups(claim, pointwise_groups, not_fused)

    def describe(self, group: KernelGroup) -> list[str]:
        return group.spec.describe_lines(group.outputs)

    def source(self, group: KernelGroup, by_name):
        return channel_reduce_kernel_source(group, by_name)

    def runtime(self) -> Runtime:
        return Runtime((CHANNEL_REDUCE_TYPES, CHANNEL_REDUCE_KERNEL_RUNTIME),
                       (CHANNEL_REDUCE_TYPES, CHANNEL_REDUCE_BINDING_RUNTIME))

    def check_operands(self, group: KernelGroup, inputs: dict) -> None:
        """Each input fits the class it is read as (what the binding checks)."""
        spec = group.spec
        full = [inputs[i] for i, c in spec.operands if c in ("full", "pooled")]
        if not full or full[0].dim() < 3:
            raise ValueError(f"{group.name}: no full-shape input of rank >= 3")
        sizes = list(full[0].shape)
        if spec.pool:  # the pooled shape, from the pool's input (the window prologue's input where it has one)
            pooled = inputs[next(i for i, c in spec.operands if c == "pooled")]
            sizes = [*pooled.shape[:2], *[pools.out_size(spec.pool, a, n) for a, n in enumerate(pooled.shape[2:])]]
        out = sizes if not spec.reduction else [sizes[0], 1, *sizes[2:]] if spec.reduction.keepdim else \
            [sizes[0], *sizes[2:]]
        for name, cls in spec.operands:
            t = inputs[name]
            if cls == "pooled":
                ok = t.dim() == spec.pool.dims + 2
            elif cls in ("full", "reduced"):
                ok = list(t.shape) == (sizes if cls == "full" else out)
            else:
                ok = t.numel() == (sizes[1] if cls == "channel" else 1)
            if ok and cls == "channel" and t.dim() > 1:  # such as [C, 1, 1]: C must land on axis 1
                ok = t.dim() <= len(sizes) and ([1] * (len(sizes) - t.dim()) + list(t.shape))[1] == sizes[1]
            if not ok:
                raise ValueError(f"{group.name}: input {name} of shape {list(t.shape)} is not {cls} for {sizes}")

    def references(self, group: KernelGroup) -> dict:
        spec, found = group.spec, {}
        if spec.pool:
            pool = spec.pool

            def pooled(local):
                value = pools.reference(pool, local[pool.data])
                return (value, None) if pool.values else value  # with indices: (values, unused indices)

            found[spec.pool_node] = pooled
        if spec.reduction:
            red = spec.reduction

            def reduced(local):
                value = table.reference(red, local[red.data])
                return (value, None) if red.values else value  # min.dim / max.dim: (values, unused indices)

            found.setdefault(spec.anchor, reduced)
        return found

    def call_comment(self, group: KernelGroup) -> str:
        return f"one {_what(group)} kernel ({group.spec.describe})"

    def why_torch(self, node, on: bool) -> str | None:
        if not on:
            return None
        if pools.is_pool_op(node):
            return f"pool kept as PyTorch's kernel: it joins no channel kernel ({pool_reason(node)})."
        reason = channel_reduction_reason(node) if table.is_channel_reduction_op(node) else None
        if reason and "channel axis" not in reason and "row" not in reason:
            return f"reduction over the channels kept as PyTorch's kernel: {reason}."
        return None

    def replaced(self, group: KernelGroup) -> tuple[str, str]:
        return f"{_what(group)} kernel", (
            f"{with_article(group.spec.describe)} is memory-bound: one launch pools each window and/or reduces each "
            "position's channels in registers, with the fused ops")

    def fusion(self, group: KernelGroup, ops: str, count: int, saved: str) -> str | None:
        return (f"- `{group.name}` ({count} ops): one launch instead of {count}, and about {saved} less traffic per "
                "call: the prologue's values, the reduced value and the epilogue's intermediates stay in registers.")

    def how(self) -> list[str]:
        return ["Channel-reduction and pool kernels: one thread per output position combines its channels or its "
                "pool window in registers, in a fixed order (pointwise ops before a pool run on each window element as "
                "it is read); the pooled or reduced intermediate is never written."]

    def call_shape(self, group: KernelGroup) -> str:
        spec = group.spec
        return (f"{spec.describe}: {list(group.shape)} -> {list(spec.out_shape)}; reads "
                + ", ".join(f"{i} ({c})" for i, c in spec.operands))

    def reads_channels_last(self, group: KernelGroup, value: str, by_name) -> bool:
        """Its one full input, or its pool's input (a pool kernel reads only its pool's input so)."""
        spec = group.spec
        if dict(spec.operands).get(value) == "pooled":
            return True
        return spec.reduction is not None and [i for i, c in spec.operands if c == "full"] == [value]


FAMILY = ChannelReductions()
