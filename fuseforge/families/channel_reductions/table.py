"""The channel-reduction table: amin, amax, sum and mean over the channel axis (dim 1) of [N, C, *spatial].

A channel reduction turns the input [N, C, *spatial] into one value per (sample, position): the output
is [N, 1, *spatial] (keepdim) or [N, *spatial]. `recognise(node)` says which one a node computes, or
raises `NotSpellable` saying why it is not one. An entry names
- the reduced tensor (`data`) and whether the channel axis is kept;
- for `torch.min(x, dim=1)` / `torch.max(x, dim=1)` (aten.min.dim / aten.max.dim, a (values, indices)
  tuple), the tuple access that reads the values (`values`): the indices must be unused, since the
  kernel computes values only;
- the C++ of the reduction: the accumulator's start value, how two partial results combine, and the
  final value from the combined accumulator (`spell_init`, `spell_combine`, `spell_final`);
- the float64 torch formula the CPU check runs in its place (`reference`).

Numerics: amin/amax propagate NaN as torch does (`ff_minimum` / `ff_maximum` of the pointwise prelude:
a NaN in any channel gives NaN); sum and mean add in fp32 in channel order per accumulator, mean divides
the sum by C (precise division, no fast-math).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
from torch import fx

from ...pointwise import NotSpellable, bind_arguments, op_key

# ATen overload -> (channel op, whether it returns a (values, indices) tuple)
_OPS = {
    "aten.amin.default": ("amin", False),
    "aten.amax.default": ("amax", False),
    "aten.sum.dim_IntList": ("sum", False),
    "aten.mean.dim": ("mean", False),
    "aten.min.dim": ("amin", True),
    "aten.max.dim": ("amax", True),
}

_INIT = {"amin": "INFINITY", "amax": "-INFINITY", "sum": "0.0f", "mean": "0.0f"}
_COMBINE = {"amin": "ff_minimum({a}, {b})", "amax": "ff_maximum({a}, {b})", "sum": "({a} + {b})",
            "mean": "({a} + {b})"}


@dataclass(frozen=True)
class ChannelReduction:
    """What one recognised node computes over axis 1 of `data`."""

    op: str  # amin, amax, sum, mean
    data: str  # the reduced tensor: [N, C, *spatial]
    keepdim: bool
    values: str | None = None  # min.dim / max.dim: the tuple access of the values (the group's value)

    @property
    def describe(self) -> str:
        return f"{self.op} over the channels"


def is_channel_reduction_op(node: fx.Node) -> bool:
    return node.op == "call_function" and op_key(node) in _OPS


def _meta(node) -> torch.Tensor | None:
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


def _channel_axis_only(dims, rank: int) -> bool:
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    return len(dims) == 1 and isinstance(dims[0], int) and dims[0] in (1, 1 - rank)


def _values_access(node: fx.Node) -> str:
    """The getitem that reads the values of a (values, indices) result; NotSpellable if the indices are read."""
    values = None
    for user in node.users:
        if user.target is not operator.getitem or not isinstance(user.args[1], int):
            raise NotSpellable(f"{user.name} reads {node.name} other than by a tuple access")
        if user.args[1] != 0:
            raise NotSpellable(f"the indices of {node.name} are used ({user.name}): a channel reduction "
                               "computes the values only")
        values = user.name if values is None else values
    if values is None or sum(1 for u in node.users) != 1:
        raise NotSpellable(f"{node.name} needs exactly one tuple access of its values")
    return values


def recognise(node: fx.Node) -> ChannelReduction:
    """The channel reduction `node` computes, or NotSpellable with the reason it is not one."""
    if not is_channel_reduction_op(node):
        raise NotSpellable(f"{op_key(node)} is not a channel reduction")
    op, with_indices = _OPS[op_key(node)]
    args = bind_arguments(node, lambda n: n)
    data = args["self"]
    meta = _meta(data)
    if meta is None or meta.dtype != torch.float32:
        raise NotSpellable(f"{node.name} does not reduce float32")
    if args.get("dtype") is not None:
        raise NotSpellable(f"{node.name} changes the dtype")
    rank = meta.dim()
    if not _channel_axis_only(args["dim"], rank):
        raise NotSpellable(f"{node.name} reduces dims {args['dim']}, not the channel axis (1) alone")
    if rank < 3:
        raise NotSpellable(f"{node.name} reduces the last axis of a rank-{rank} tensor: a row reduction, "
                           "not a channel kernel")
    values = _values_access(node) if with_indices else None
    return ChannelReduction(op, data.name, bool(args.get("keepdim")), values)


def spell_init(red: ChannelReduction) -> str:
    return _INIT[red.op]


def spell_combine(red: ChannelReduction, a: str, b: str) -> str:
    return _COMBINE[red.op].format(a=a, b=b)


def spell_final(red: ChannelReduction, acc: str, channels: str) -> str:
    """The reduced value from the combined accumulator `acc` over `channels` values."""
    return f"({acc} / (float){channels})" if red.op == "mean" else acc


def reference(red: ChannelReduction, v: torch.Tensor) -> torch.Tensor:
    """The reduced value in the precision of `v` (float64 on the CPU check): NaN propagates like torch."""
    if red.op == "amin":
        out = v.amin(dim=1, keepdim=True)
    elif red.op == "amax":
        out = v.amax(dim=1, keepdim=True)
    else:
        out = v.sum(dim=1, keepdim=True)
        out = out / v.shape[1] if red.op == "mean" else out
    return out if red.keepdim else out.squeeze(1)
