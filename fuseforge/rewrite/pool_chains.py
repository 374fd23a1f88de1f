"""Family `pool chains`: two pools in a row whose windows tile their input are one pool of the product window.

A pool whose stride equals its window (no padding, no dilation, floor mode) cuts its input into disjoint blocks
of k values and drops the last k - 1 at most. A second such pool of window k' cuts the first's output into blocks
of k' blocks: k k' input values, from index i k k' on, and floor(floor(n / k) / k') = floor(n / (k k')) blocks
per axis. So the pair is one pool of window and stride k k', per axis: the max of the maxima of the blocks is the
maximum of their union (exact, NaN propagating as in both), and the mean of k' means of k values each is the mean
of the k k' values (exact in real arithmetic; in fp32 one sum of k k' terms instead of two roundings of sums).
The intermediate pooled tensor is never written, and a later kernel reads the input once.
"""

from __future__ import annotations

import torch

from .engine import Builder, guard, rule, value
from .guards import sole_use
from .pattern import Match, Op, arguments

aten = torch.ops.aten
FAMILY = "pool chains"
AVERAGE = ("aten.avg_pool1d.default", "aten.avg_pool2d.default", "aten.avg_pool3d.default")
MAXIMUM = ("aten.max_pool1d.default", "aten.max_pool2d.default", "aten.max_pool3d.default")


def _axes(node) -> int:
    return int(str(node.target).split("_pool")[1][0])  # avg_pool3d -> 3


def _per_axis(v, axes: int) -> tuple[int, ...] | None:
    """An int or a list of ints as one int per pooled axis (None for anything else)."""
    v = [v] if isinstance(v, int) else list(v) if isinstance(v, (list, tuple)) else None
    if v is None or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return None
    return tuple(v * axes) if len(v) == 1 else tuple(v) if len(v) == axes else None


def tiling_window(node) -> tuple[int, ...] | None:
    """The window of a pool that tiles its input (stride = window, no padding, dilation 1, floor mode, and for an
    average pool no divisor override), one size per pooled axis; None for any other pool."""
    args, axes = arguments(node), _axes(node)
    window = _per_axis(args["kernel_size"], axes)
    stride = window if args["stride"] in (None, [], ()) else _per_axis(args["stride"], axes)
    if window is None or stride != window or any(p != 0 for p in _per_axis(args["padding"], axes) or [1]):
        return None
    if args.get("ceil_mode") or args.get("divisor_override") is not None:
        return None
    if "dilation" in args and any(d != 1 for d in _per_axis(args["dilation"], axes) or [2]):
        return None
    return window


@guard("both pools tile their input: stride equal to the window, no padding, dilation 1, floor mode, no divisor "
       "override; the same op on the same axes")
def both_tile(m: Match) -> bool:
    inner, outer = m["inner"], m.root
    x = value(m["x"])
    return (inner.target == outer.target and x is not None and x.is_floating_point()
            and tiling_window(inner) is not None and tiling_window(outer) is not None)


def _merged(m: Match, build: Builder):
    window = [a * b for a, b in zip(tiling_window(m["inner"]), tiling_window(m.root))]
    args = dict(arguments(m.root))
    args.update(self=m["x"], kernel_size=window, stride=window)
    return build(m.root.target, *args.values())


@rule(FAMILY, Op(*AVERAGE, self=Op(*AVERAGE, bind="inner", self="x")), sole_use("inner"), both_tile)
def average_pool_of_an_average_pool(m: Match, build: Builder):
    """avg_pool(avg_pool(x, k), k') = avg_pool(x, k k')   (both tiling their input: stride = window, no padding)

    The mean of k' means of k values each is the mean of the k k' values, block for block, and the floor of the
    block counts composes: floor(floor(n / k) / k') = floor(n / (k k')).
    """
    return _merged(m, build)


@rule(FAMILY, Op(*MAXIMUM, self=Op(*MAXIMUM, bind="inner", self="x")), sole_use("inner"), both_tile)
def max_pool_of_a_max_pool(m: Match, build: Builder):
    """max_pool(max_pool(x, k), k') = max_pool(x, k k')   (both tiling their input: stride = window, no padding)

    The maximum of k' blocks' maxima is the maximum of their union; exact, NaN propagating as in both.
    """
    return _merged(m, build)
