"""Family `global pools`: an adaptive pool to one value per channel is a reduction over the spatial axes.

With output size 1 along an axis, PyTorch's adaptive pools take one window from index 0 to the axis' size:
the whole axis. So the pool is the mean (average pools) or the amax (max pools, NaN propagating as in both)
over the spatial axes, kept as size-1 axes; as reductions they join the kernels around them (a row kernel
over the contiguous spatial axes, or the conv rules of `conv_pool`), where the pool ops stay torch calls.
"""

from __future__ import annotations

import torch

from .engine import Builder, Guard, rule, value
from .pattern import Item, Match, Op

aten = torch.ops.aten
FAMILY = "global pools"
AVERAGE = ("aten.adaptive_avg_pool1d.default", "aten.adaptive_avg_pool2d.default", "aten.adaptive_avg_pool3d.default")
MAXIMUM = ("aten.adaptive_max_pool1d.default", "aten.adaptive_max_pool2d.default", "aten.adaptive_max_pool3d.default")


def _ones(m: Match) -> bool:
    size = m["size"]
    size = [size] if isinstance(size, int) else list(size)
    return len(size) > 0 and all(s == 1 for s in size)


to_one = Guard("the pool's output size is 1 along every pooled axis", _ones)
floating = Guard("the pooled tensor is floating-point",
                 lambda m: value(m["x"]) is not None and value(m["x"]).is_floating_point())
indices_unused = Guard("the pool's indices are unused (its one use is the tuple access of its values)",
                       lambda m: len(m["pool"].users) == 1)


def _spatial_axes(m: Match) -> list[int]:
    size = m["size"]
    pooled = 1 if isinstance(size, int) else len(size)
    rank = value(m["x"]).dim()
    return list(range(rank - pooled, rank))


@rule(FAMILY, Op(*AVERAGE, self="x", output_size="size"), to_one, floating)
def global_average_pool_is_a_mean(m: Match, build: Builder):
    """adaptive_avg_pool(x, 1) = mean(x, spatial axes, keepdim=True)

    Output size 1: one window, the whole of each pooled axis, divided by its number of values.
    """
    return build(aten.mean.dim, m["x"], _spatial_axes(m), True)


@rule(FAMILY, Item(0, Op(*MAXIMUM, bind="pool", self="x", output_size="size")), to_one, floating, indices_unused)
def global_max_pool_is_an_amax(m: Match, build: Builder):
    """adaptive_max_pool(x, 1)[0] = amax(x, spatial axes, keepdim=True) when the indices are unused

    Output size 1: one window, the whole of each pooled axis; both propagate NaN.
    """
    return build(aten.amax.default, m["x"], _spatial_axes(m), True)
