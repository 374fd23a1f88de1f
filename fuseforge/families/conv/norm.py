"""The channel norm a conv kernel's output may go into (`group.py` forms such groups; the direct kernel, or the
tensor-core kernel's TF32 form): a train-mode batch norm, a group norm or an instance norm (the channel-norm table's)
of the epilogue's last value, with the pointwise ops around the norm that a channel kernel pair would take.

The identity it rests on: a unit's statistics are functions of its sum and its sum of squares,

    mean = S / n,  M2 = Q - S * mean  (S = sum of v, Q = sum of v^2 over the unit's n values),

and both sums can be taken while the values are computed. So the conv kernel stores its output and adds S and Q per
unit into doubles as it goes (`direct.cuh`'s launch_store_stats, `igemm.cuh`'s store_tile_stats); the channel
kernels then skip their statistics pass, which would read the whole output back, and only normalise (`channel.cu`'s
ff_chan_launch_with_sums): one read of the convolution's output instead of two. The norm part is a channel group in
its own right (`ChannelSpec`), whose normalised tensor is the conv kernel's output; the group's binding holds that
output as a scratch tensor.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from torch import fx

from ...plan import KernelGroup
from ...pointwise import NotSpellable
from ..channel_norms import FAMILY as CHANNEL_NORMS
from ..channel_norms import table as norm_table
from ..channel_norms.group import ChannelSpec, channel_spec


@dataclass(frozen=True)
class ConvNorm:
    """The group's channel norm: `node` normalises `data`, the conv kernel's only output, and `members` (the norm,
    its result accesses and the ops around it) are one channel kernel pair whose statistics the conv kernel takes."""

    node: str
    data: str
    members: tuple[str, ...]  # in graph order
    channel: ChannelSpec

    @property
    def stat_groups(self) -> int:
        """The conv kernel's units: 0 for one a channel (batch norm), else G groups of channels per sample."""
        return self.channel.norm.groups

    def describe(self) -> str:
        return f"{self.channel.norm.describe} of {self.data}"


def norm_after(members: set[str], by_name: dict[str, fx.Node]) -> tuple[fx.Node, norm_table.ChannelNorm] | None:
    """The one channel norm among the readers of the group's only output, and what it computes; None if there is
    none. (Its other readers may read it too: the ops after the norm that a channel kernel takes, such as a residual
    add, read it as a full-shape input; any other reader gets it as an output of the kernel, which writes it anyway.)"""
    outputs = [n for n in members if any(u.name not in members for u in by_name[n].users)]
    if len(outputs) != 1:
        return None
    found = []
    for node in by_name[outputs[0]].users:
        if not norm_table.is_channel_op(node):
            continue
        try:
            norm = norm_table.recognise(node)
        except NotSpellable:
            continue
        if norm.data == outputs[0]:
            found.append((node, norm))
    return found[0] if len(found) == 1 else None


def _norm_spec(members: set[str], conv_members: set[str], node: fx.Node, norm: norm_table.ChannelNorm, by_name,
               reach) -> ChannelSpec | str:
    """The norm part's ChannelSpec, or why `members` cannot be one beside the conv kernel's `conv_members`."""
    if not reach.convex(members | conv_members):
        return "fusing would create a cycle through an op outside the kernel"
    spec = channel_spec(members, node, norm, by_name, reach)
    if isinstance(spec, str):
        return spec
    if spec.warp_units:
        return (f"its units hold {spec.values_per_unit} values, which a warp normalises from registers in one pass: "
                "there is no statistics pass to save")
    return spec


def grow_norm(grower, conv_members: set[str], reach) -> tuple[set[str], ConvNorm] | None:
    """The channel norm after the conv group `conv_members`, grown by `grower` with the pointwise ops a channel
    kernel pair takes around it, as (members, ConvNorm); None where there is no such norm or it cannot be one."""
    by_name = grower.by_name
    found = norm_after(conv_members, by_name)
    if found is None:
        return None
    node, norm = found
    start = {node.name, *(u.name for u in node.users if u.target is operator.getitem)}
    grown = grower.grow(node.name, start, lambda members: _norm_spec(members, conv_members, node, norm, by_name,
                                                                     reach))
    grower.anchor_reasons.pop(node.name, None)  # the channel family tries the norm again by itself
    if grown is None:
        return None
    members, spec = grown
    order = tuple(n for n in by_name if n in members)
    return members, ConvNorm(node.name, norm.data, order, spec)


def _inputs(nodes: tuple[str, ...], by_name) -> tuple[str, ...]:
    """The values `nodes` read from outside them, in first-use order (as the partition orders a group's inputs)."""
    members, found = set(nodes), []
    for n in nodes:
        for arg in by_name[n].all_input_nodes:
            if arg.name not in members and arg.name not in found:
                found.append(arg.name)
    return tuple(found)


def split(group: KernelGroup, by_name) -> tuple[KernelGroup, KernelGroup]:
    """The group's two kernels as groups of their own: the conv kernel (its only output the normalised tensor) and
    the channel kernels' normalising pass (the group's outputs)."""
    norm = group.spec.norm
    conv_nodes = tuple(n for n in group.nodes if n not in norm.members)
    conv_inputs = _inputs(conv_nodes, by_name)
    conv_part = KernelGroup(f"{group.name}_conv", conv_nodes, conv_inputs, (norm.data,), group.shape, group.family,
                            group.spec.with_operand_order(conv_inputs))
    norm_inputs = _inputs(norm.members, by_name)
    norm_outputs = tuple(o for o in group.outputs if o != norm.data)  # the convolution's output, where read outside
    norm_part = KernelGroup(f"{group.name}_norm", norm.members, norm_inputs, norm_outputs, group.shape,
                            CHANNEL_NORMS, norm.channel.with_operand_order(norm_inputs))
    return conv_part, norm_part
