"""Channel groups: a train-mode batch norm or a group norm with the pointwise ops around it, as one kernel pair.

Runs after the pointwise groups (and row groups) are formed. Each node of the channel-norm table
(`table.recognise`: train-mode batch norm and group norm over [N, C, *spatial] or [N, C]) becomes a
channel group with the tuple accesses (getitem) of its results (batch norm), and then takes in neighbouring pointwise groups (the
prologue that computes the normalised value, the epilogues that read the normalised result, and groups
feeding those) while the whole stays a channel group:

- convex (no path leaves the group and comes back);
- every pointwise member has the norm's input shape F = [N, C, *spatial] (one value per element); the
  members with one value per channel are batch norm's statistics results only (batch mean, inverse std,
  new running mean and variance), and no pointwise member reads them;
- every external input is *full* (shape F), *per-channel* (C at axis 1 of F, ones elsewhere, such as a
  [C, 1, 1] bias; the norm's own parameters are [C]) or a *scalar*, and float32, read in one class only;
- at least one input is full (it gives the kernels N, C and the spatial size at run time); outputs are float32.

One norm per group. Two kernels run it: per-channel partial statistics of the prologue's value, then
finalise + running statistics + normalise + epilogue. Whenever a neighbour stays apart, the reason is
recorded (WhyNotFused).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import torch
from torch import fx

from ...partition_family import GroupGrower, edge_notes, notes_outside, recognise_reason, restate_anchor_notes
from ...plan import Claim
from ...pointwise import NotSpellable
from ...traced import size_hint, tensor_meta, traced_shape
from ..base import operand_class
from . import table
from .table import ChannelNorm

OPERAND_CLASSES = ("full", "channel", "scalar")


WARP_UNIT = 256  # channel.cu's kFFChanWarpUnit: the values a warp's lanes hold in registers, 8 each


def values_per_unit(norm: ChannelNorm, shape) -> int:
    """The values one unit normalises (binding.h's per_unit), at the model file's sizes: a channel's over the
    batch (batch norm), or a sample's group of channels (group norm)."""
    shape = tuple(size_hint(s) for s in shape)
    spatial = math.prod(shape[2:])
    return shape[1] // norm.groups * spatial if norm.groups else shape[0] * spatial


@dataclass(frozen=True)
class ChannelSpec:
    """How a channel kernel pair sees its group: the norm, its operands' classes and its result accesses."""

    anchor: str  # the norm node
    norm: ChannelNorm
    operands: tuple[tuple[str, str], ...]  # (input, class): full, channel or scalar
    results: tuple[tuple[str, int], ...]  # (getitem member, index into the norm's result tuple)
    channel_nodes: tuple[str, ...]  # members with one value per channel (statistics results)
    full_shape: tuple  # the norm's input shape F (symbolic sizes as names)
    values_per_unit: int  # a unit's values at the model file's sizes (`values_per_unit`)

    @property
    def warp_units(self) -> bool:
        """Whether a warp holds each unit, in one launch, when the input is NCHW (channel.cu's ff_chan_warp_units:
        at most WARP_UNIT values, not a batch norm of [N, C], which the column kernels take; a channels-last input
        takes the NHWC kernels' two passes whatever its units)."""
        columns = not self.norm.groups and all(s == 1 for s in self.full_shape[2:])
        return self.values_per_unit <= WARP_UNIT and not columns

    @property
    def launches(self) -> int:
        """One (a warp per unit), else two: statistics, then normalise."""
        return 1 if self.warp_units else 2

    def operand_class(self, name: str) -> str:
        return dict(self.operands)[name]

    def with_operand_order(self, inputs: tuple[str, ...]) -> ChannelSpec:
        return ChannelSpec(self.anchor, self.norm, tuple((i, self.operand_class(i)) for i in inputs), self.results,
                           self.channel_nodes, self.full_shape, self.values_per_unit)



def _results(anchor: fx.Node, norm: ChannelNorm) -> dict[str, int] | str:
    if norm.groups:  # group norm returns the normalised value itself
        return {anchor.name: 0}
    found = {}
    for user in anchor.users:
        if user.target is not operator.getitem or not isinstance(user.args[1], int):
            return f"{user.name} reads {anchor.name} other than by a tuple access"
        found[user.name] = user.args[1]
    return found


def _kinds(members: list[str], anchor: fx.Node, results: dict[str, int], full: tuple, by_name) -> dict | str:
    """Each member's kind (`anchor`, `element`, `channel`); or why a member fits none."""
    kinds = {}
    for name in members:
        if name in results:
            kinds[name] = table.result_kind(results[name])
        elif name == anchor.name:
            kinds[name] = "anchor"
        else:
            meta = tensor_meta(by_name[name])
            if meta is None or meta.dtype not in (torch.float32, torch.bool):
                return f"{name} has dtype {getattr(meta, 'dtype', None)}; channel kernels compute float32"
            if traced_shape(by_name[name]) != full:
                return (f"{name} has shape {list(traced_shape(by_name[name]))}: a channel kernel computes values of the "
                        f"norm's input shape {list(full)}")
            kinds[name] = "element"
    return kinds


def _check_operands(order, kinds, spec_anchor: str, norm: ChannelNorm, full, by_name) -> dict[str, str] | str:
    """The class of every external input; or why one cannot be read by a channel kernel."""
    classes: dict[str, str] = {}
    for name in order:
        node = by_name[name]
        for arg in node.all_input_nodes:
            if arg.name in kinds:
                if kinds[name] == "element" and kinds[arg.name] == "channel":
                    return f"{name} reads the per-channel statistic {arg.name}"
                continue
            meta = tensor_meta(arg)
            if meta is None or meta.dtype != torch.float32:
                return f"input {arg.name} of {name} has dtype {getattr(meta, 'dtype', None)}; channel kernels read float32"
            if name == spec_anchor and arg.name != norm.data:
                if traced_shape(arg) != (full[1],):
                    return f"parameter {arg.name} of {name} has shape {list(traced_shape(arg))}, not [{full[1]}]"
                cls = "channel"
            else:
                cls = operand_class(traced_shape(arg), full)
            if cls is None:
                return (f"input {arg.name} of shape {list(traced_shape(arg))} broadcasts neither per element, per channel "
                        f"nor as a scalar against the norm's input shape {list(full)}")
            if classes.get(arg.name, cls) != cls:
                return f"{arg.name} would be read both as {classes[arg.name]} and as {cls}"
            classes[arg.name] = cls
    if "full" not in classes.values():
        return "no input of the kernel has the norm's input shape (it gives the kernel N, C and the spatial size)"
    return classes


def channel_spec(members: set[str], anchor: fx.Node, norm: ChannelNorm, by_name, reach) -> ChannelSpec | str:
    """The group's ChannelSpec, or why `members` cannot be one channel kernel pair."""
    if not reach.convex(members):
        return "fusing would create a cycle through an op outside the kernel"
    results = _results(anchor, norm)
    if isinstance(results, str):
        return results
    full = traced_shape(by_name[norm.data])
    order = [n for n in by_name if n in members]
    kinds = _kinds(order, anchor, results, full, by_name)
    if isinstance(kinds, str):
        return kinds
    classes = _check_operands(order, kinds, anchor.name, norm, full, by_name)
    if isinstance(classes, str):
        return classes
    for name in order:
        if name != anchor.name and any(u.name not in members for u in by_name[name].users) \
                and tensor_meta(by_name[name]).dtype != torch.float32:
            return f"a kernel output ({name}) would not be float32"
    return ChannelSpec(anchor.name, norm, tuple(classes.items()), tuple(results.items()),
                       tuple(n for n in order if kinds[n] == "channel"), full,
                       values_per_unit(norm, by_name[norm.data].meta["val"].shape))



def _edge_reason(grower: GroupGrower, mine: int, other: fx.Node, channel_of: dict[str, int],
                 elsewhere: set[str]) -> str | None:
    if other.name in channel_of:
        return grower.two_anchors_reason(mine, channel_of[other.name], "channel kernels",
                                         "a channel kernel holds one norm")
    if other.name in elsewhere:
        return "in a row kernel: a kernel holds one reduction"
    return grower.outside_reason(other)


def form_channel_groups(claim: Claim, pointwise_groups: list[list[str]], not_fused: list):
    """Channel groups grown from `pointwise_groups`: returns (pointwise groups left, [(members, ChannelSpec)]);
    `not_fused` is updated: entries about channel-group members are replaced by the channel groups' own, and
    a norm that cannot be a channel kernel gets its reason."""
    graph, reach, elsewhere = claim.graph, claim.reach, claim.claimed  # elsewhere: members of row groups
    grower = GroupGrower(claim, pointwise_groups)
    for node in graph.nodes:
        if not table.is_channel_op(node) or node.name in claim.claimed:  # claimed: a conv kernel takes statistics
            continue
        try:
            norm = table.recognise(node)
        except NotSpellable as exc:
            grower.anchor_reasons[node.name] = str(exc)
            continue
        members = {node.name, *(u.name for u in node.users if u.target is operator.getitem)}
        grown = grower.grow(node.name, members, lambda members, node=node, norm=norm:
                            channel_spec(members, node, norm, grower.by_name, reach))
        if grown:
            grower.formed.append(grown)
    channel_of = grower.group_of()
    kept = restate_anchor_notes(notes_outside(not_fused, channel_of), grower.anchor_reasons, "channel")
    not_fused[:] = kept + edge_notes(
        grower, lambda i, other, after: _edge_reason(grower, i, other, channel_of, elsewhere))
    return grower.untaken(pointwise_groups), grower.formed


def channel_op_reason(node: fx.Node) -> str | None:
    """Why a node of the channel-norm table is not a channel kernel (None when it can be one)."""
    return recognise_reason(table.recognise, node)
