"""The reductions a conv kernel may end in (`group.py` forms such groups): the epilogue's last value reduced over all
the convolution's spatial axes (the direct kernel; a sum or mean: one value per (n, k); global average pooling after
the rewrite is such a mean) or over its output channels (either kernel; the channel-reduction table's amin, amax,
sum, mean and min/max values over axis 1: one value per position)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import fx

from ... import pointwise
from ...pointwise import NotSpellable
from ...traced import tensor_meta
from ..channel_reductions import table as channel_table


@dataclass(frozen=True)
class ConvReduction:
    """The group's last op: a reduction of `data`, the epilogue's last value, over all its spatial axes (out[n, k])
    or over its channels (out[n, (od,) oh, ow])."""

    node: str
    data: str
    op: str  # "sum" or "mean" (spatial); "amin", "amax", "sum" or "mean" (channels)
    keepdim: bool
    channel: channel_table.ChannelReduction | None = None  # over the channels: the channel-reduction table's entry

    @property
    def over(self) -> str:
        return "channels" if self.channel else "spatial"

    @property
    def values(self) -> str | None:
        """min.dim / max.dim over the channels: the tuple access of the values."""
        return self.channel.values if self.channel else None

    @property
    def output(self) -> str:
        return self.values or self.node

    @property
    def members(self) -> set[str]:
        return {self.node} | ({self.values} if self.values else set())

    def describe(self) -> str:
        return f"{self.op} of {self.data} over its {'spatial axes' if self.over == 'spatial' else 'channels'}"


_SPATIAL_SUMS = {"aten.sum.dim_IntList": "sum", "aten.mean.dim": "mean"}


def recognise_reduction(node: fx.Node) -> ConvReduction | None:
    """The reduction `node` computes that a conv kernel can end in: a spatial sum, or a channel reduction of the
    channel-reduction table (over axis 1 of a rank-4 or -5 float32 tensor); None when it is neither."""
    found = recognise_spatial_sum(node)
    if found is not None or not channel_table.is_channel_reduction_op(node):
        return found
    try:
        red = channel_table.recognise(node)
    except NotSpellable:
        return None
    if tensor_meta(node.args[0]).dim() not in (4, 5):
        return None
    return ConvReduction(node.name, red.data, red.op, red.keepdim, red)


def recognise_spatial_sum(node: fx.Node) -> ConvReduction | None:
    """The spatial sum `node` computes: a float32 sum or mean over all axes past the first two of a rank-4 or -5
    float32 tensor, keepdim or not, no dtype change; None when it is none."""
    if node.op != "call_function" or str(node.target) not in _SPATIAL_SUMS:
        return None
    a = pointwise.bind_arguments(node, lambda n: n)
    data, dims = a.get("self"), a.get("dim")
    if not isinstance(data, fx.Node) or tensor_meta(data) is None or tensor_meta(node) is None:
        return None
    rank = tensor_meta(data).dim()
    if rank not in (4, 5) or a.get("dtype") is not None or not isinstance(dims, (list, tuple)) or \
            tensor_meta(data).dtype != torch.float32 or tensor_meta(node).dtype != torch.float32:
        return None
    axes = sorted(d % rank for d in dims if isinstance(d, int))
    if len(axes) != len(dims) or axes != list(range(2, rank)):
        return None
    return ConvReduction(node.name, data.name, _SPATIAL_SUMS[str(node.target)], bool(a.get("keepdim")))
