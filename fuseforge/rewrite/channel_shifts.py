"""Family `channel shifts`: a convolution's bias is a per-channel add, moved to where a fused kernel applies it.

PyTorch does not let cuDNN add a convolution's bias: it adds it in a second pass over the output (a read
and a write of the largest tensor of most convolution models). As a pointwise add of a [C, 1, ...] tensor
the bias joins the kernel after the convolution, which reads it once per channel. A per-channel (or
scalar) add commutes with a max pool, whose windows never leave a channel, and with a mean over axes along
which it is constant; moved after either it is added to the smaller result, in the kernel that reads it.
"""

from __future__ import annotations

import torch

from .engine import Builder, Guard, guard, rule, value
from .guards import reduced_axes, sole_use
from .pattern import Match, Op, arguments

aten = torch.ops.aten
FAMILY = "channel shifts"
CONVS = ("aten.conv1d.default", "aten.conv2d.default", "aten.conv3d.default", "aten.conv_transpose1d.input",
         "aten.conv_transpose2d.input", "aten.conv_transpose3d.input")
MAX_POOLS = {"aten.max_pool1d.default": 1, "aten.max_pool2d.default": 2, "aten.max_pool3d.default": 3}

has_bias = Guard("the convolution has a bias tensor", lambda m: value(m["b"]) is not None)


@rule(FAMILY, Op(*CONVS, bind="conv", bias="b"), has_bias)
def conv_bias_as_channel_add(m: Match, build: Builder):
    """conv(x, W, b) = conv(x, W) + b[:, None, ...]   (one value of b per output channel)

    The same arithmetic as eager, which also adds the bias after the convolution, in its own pass.
    """
    conv = m["conv"]
    args = list(arguments(conv).values())
    args[2] = None  # the bias: the third argument of every convolution
    bare = build(conv.target, *args)
    spatial = value(args[1]).dim() - 2  # the weight is [C_out, C_in / groups, *kernel] (transposed: C_in first)
    shift = build(aten.view.default, m["b"], [value(m["b"]).shape[0], *[1] * spatial])
    return build(aten.add.Tensor, bare, shift)


def _shift_operand(m: Match, axes) -> tuple | None:
    """(full, shift) of the add `added` (operands p, q): full has the add's shape, shift is a number or a
    tensor constant along `axes` of the add's output."""
    out = value(m["added"])
    if out is None or axes is None:
        return None
    for full, shift in ((m["p"], m["q"]), (m["q"], m["p"])):
        if value(full) is not None and list(value(full).shape) == list(out.shape) and _constant_along(shift, out, axes):
            return full, shift
    return None


def _constant_along(shift, out, axes) -> bool:
    """Whether `shift` (a number, or a tensor broadcast against `out`) is constant along `axes` of `out`."""
    if isinstance(shift, (int, float)) and not isinstance(shift, bool):
        return True
    s = value(shift)
    if s is None or s.dim() > out.dim():
        return False
    offset = out.dim() - s.dim()
    return all(s.shape[a - offset] == 1 for a in axes if a >= offset)


def _pooled_axes(m: Match) -> range | None:
    out = value(m["added"])
    return None if out is None else range(out.dim() - MAX_POOLS[str(m.root.target)], out.dim())


@guard("the add has no scale (alpha 1); one operand has its full shape, the other is a number or constant "
       "over the pooled axes")
def per_channel_shift(m: Match) -> bool:
    return m["alpha"] == 1 and _shift_operand(m, _pooled_axes(m)) is not None


@rule(FAMILY, Op(*MAX_POOLS, self=Op("aten.add.Tensor", bind="added", self="p", other="q", alpha="alpha")),
      sole_use("added"), per_channel_shift)
def max_pool_of_channel_shift(m: Match, build: Builder):
    """max_pool(x + b) = max_pool(x) + b   (b constant within every window: per channel, or a number)

    Exact in floating point: rounding is monotonic, so the largest x + b of a window is the sum with the
    largest x.
    """
    full, shift = _shift_operand(m, _pooled_axes(m))
    pool_args = dict(arguments(m.root))
    pool_args["self"] = full
    return build(aten.add.Tensor, build(m.root.target, *pool_args.values()), shift)


@guard("the add has no scale (alpha 1); one operand has its full shape, the other is a number or constant "
       "along the mean's axes")
def shift_constant_along_the_mean(m: Match) -> bool:
    return m["alpha"] == 1 and m.root.kwargs.get("dtype") is None and _shift_operand(m, reduced_axes(m)) is not None


@rule(FAMILY, Op("aten.mean.dim", self=Op("aten.add.Tensor", bind="added", self="p", other="q", alpha="alpha"),
                 dim="dims", keepdim="keepdim"),
      sole_use("added"), shift_constant_along_the_mean)
def mean_of_channel_shift(m: Match, build: Builder):
    """mean(x + b, axes) = mean(x, axes) + b   (b constant along the axes: per channel, or a number)

    Each mean averages values that share one b, so b comes out of the sum and the division whole; the add
    then runs on the mean's output instead of the full tensor. Without keepdim, b loses the reduced axes.
    In floating point b is rounded into one sum instead of every element: equal within the mean's rounding.
    """
    full, shift = _shift_operand(m, reduced_axes(m))
    out = value(m["added"])
    mean = build(aten.mean.dim, full, m["dims"], m["keepdim"])
    if not m["keepdim"] and not isinstance(shift, (int, float)):
        s = value(shift)
        offset = out.dim() - s.dim()
        axes = reduced_axes(m)
        kept = [n for a, n in enumerate(s.shape) if a + offset not in axes]
        shift = build(aten.view.default, shift, kept)
    return build(aten.add.Tensor, mean, shift)
