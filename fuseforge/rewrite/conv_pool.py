"""Family `linear maps` (convolutions): a global average pool of a convolution is a small linear map.

mean_{i,j} conv(x, W, b)[n, o, i, j] = b_o + Σ_{c,p,q} W[o, c, p, q] · S[n, c, p, q] / (Ho·Wo), where
S[n, c, p, q] is the sum of the input pixels that kernel tap (p, q) reads over all output positions.
With stride 1 and dilation 1 that set is a rectangle of the input, clipped exactly at the zero-padded
borders: S = A · x · Bᵀ per (n, c), with A[p, r] = 1 where row r is read by tap p (a band matrix,
built in the graph with `new_ones`, `tril`, `triu`). The convolution (the largest cost) disappears.

A transposed convolution is the same map read the other way: input pixel r meets output pixel r·s − pad + p
through tap p, so the sum over the output positions is again Σ_{c,p,q} W[c, o, p, q] · S[n, c, p, q], with
A[p, r] = 1 where r·s − pad + p lands inside the output (any stride, padding and output padding; built with
`new_ones`, `cumsum` and two clamps).
"""

from __future__ import annotations

import torch

from ..cost import conv_seconds
from ..rates import BANDWIDTH, HOST_OP_S, SGEMM_FLOPS
from .engine import Builder, Guard, guard, is_state, rule, value
from .guards import hint, hint_numel, reduced_axes, sole_use, state
from .pattern import Match, Op

aten = torch.ops.aten
FAMILY = "linear maps"


def _conv() -> Op:
    return Op("aten.conv2d.default", bind="conv", input="x", weight="w", bias="b", stride="stride",
              padding="padding", dilation="dilation", groups="groups")


def _transposed(m: Match) -> bool:
    return str(m["conv"].target) == "aten.conv_transpose2d.input"


def _pair(v) -> tuple[int, int]:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


@guard("the convolution is 2-D on a batch, with stride 1, dilation 1 and one group")
def plain_conv(m: Match) -> bool:
    x, w = value(m["x"]), value(m["w"])
    return (x is not None and x.dim() == 4 and x.is_floating_point() and w is not None and w.dim() == 4
            and _pair(m["stride"]) == (1, 1) and _pair(m["dilation"]) == (1, 1) and m["groups"] == 1
            and all(isinstance(s, int) for s in x.shape[1:]))


bias_is_state = Guard("`b` is absent, or a parameter or buffer", lambda m: m["b"] is None or is_state(m["b"], m.ctx))


# Ops the window sums and the small product add to the forward (the band matrices, two mm, permutes, views,
# copies, the weight's scaling, the linear), less the convolution and the pool they replace.
ADDED_OPS = 18


def _costs(m: Match) -> tuple[float, float]:
    """Expected seconds of the convolution and its pool, and of the window sums, the small product and the
    host time of the ops they add (which the benchmark sees where the GPU work is short)."""
    x, w, y = value(m["x"]).shape, value(m["w"]).shape, value(m["conv"]).shape
    n, c, h, wd = hint(x[0]), *x[1:]
    kh, kw = w[2:]
    transposed = _transposed(m)
    o = w[1] if transposed else w[0]
    before = conv_seconds(m["conv"]) + 2 * 4 * hint_numel(y) / BANDWIDTH  # eager's cuDNN call; written, read
    after_flops = 2.0 * n * c * kw * h * (wd + kh) + 2.0 * n * o * c * kh * kw
    added = ADDED_OPS + (LANDING_OPS if transposed else 0)
    after = after_flops / SGEMM_FLOPS + 4 * n * c * h * wd / BANDWIDTH + added * HOST_OP_S
    return before, after


cheaper = Guard("the window sums, the small product and the host time of their ops cost less than the "
                "convolution and its pool", lambda m: _costs(m)[1] < _costs(m)[0])


def _window_matrix(build: Builder, like, taps: int, size: int, out: int, pad: int):
    """M[p, r] = 1 where input index r is read by tap p at some output index (stride 1, dilation 1)."""
    ones = build(aten.new_ones.default, like, [taps, size], pin_memory=False)  # as export spells it
    return build(aten.triu.default, build(aten.tril.default, ones, out - 1 - pad), -pad)


# Ops a transposed convolution's window matrices add (two of them, nine ops each)
LANDING_OPS = 18


def _landing_matrix(build: Builder, like, taps: int, size: int, out: int, stride: int, pad: int):
    """M[p, r] = 1 where input index r lands inside the output through tap p of a transposed convolution
    (0 <= r·stride − pad + p < out), from integer-valued float indices (exact below 2^24)."""
    ones = build(aten.new_ones.default, like, [taps, size], pin_memory=False)
    r = build(aten.sub.Tensor, build(aten.cumsum.default, ones, 1), 1)  # M's column index
    p = build(aten.sub.Tensor, build(aten.cumsum.default, ones, 0), 1 + pad)  # its row index, less the padding
    landing = build(aten.add.Tensor, build(aten.mul.Tensor, r, stride), p)
    inside_low = build(aten.clamp.default, build(aten.add.Tensor, landing, 1), 0, 1)  # 1 where landing >= 0
    inside_high = build(aten.clamp.default, build(aten.rsub.Scalar, landing, out), 0, 1)  # where landing < out
    return build(aten.mul.Tensor, inside_low, inside_high)


def _viewed(build: Builder, t, shape: list[int]):
    """t.view(shape), through a contiguous copy when t's strides do not allow a view (as export spells it)."""
    if not value(t).is_contiguous():
        t = build(aten.clone.default, t, memory_format=torch.contiguous_format)
    return build(aten.view.default, t, shape)


def _pooled(m: Match, build: Builder):
    """[N, O]: the mean of the convolution over its output positions."""
    x, w = m["x"], m["w"]
    _, c, h, wd = value(x).shape
    _, _, kh, kw = value(w).shape
    ho, wo = value(m["conv"]).shape[2:]
    ph, pw = _pair(m["padding"])
    if _transposed(m):  # W is [C, O, kh, kw]
        sh, sw = _pair(m["stride"])
        rows = _landing_matrix(build, x, kh, h, ho, sh, ph)  # [kh, H]
        same = (kw, wd, wo, sw, pw) == (kh, h, ho, sh, ph)
        cols = rows if same else _landing_matrix(build, x, kw, wd, wo, sw, pw)  # [kw, W]
        o, w = value(w).shape[1], build(aten.permute.default, w, [1, 0, 2, 3])  # [O, C, kh, kw]
    else:
        rows = _window_matrix(build, x, kh, h, ho, ph)  # [kh, H]
        cols = rows if (kw, wd, wo, pw) == (kh, h, ho, ph) else _window_matrix(build, x, kw, wd, wo, pw)  # [kw, W]
        o = value(w).shape[0]
    # Plain 2-D products only (aten.matmul is not an op of the captured graphs), the contiguous axis first:
    # x·colsᵀ is one GEMM over x without a transposed copy of it; the second product runs on the small
    # [N, C, kw, H] tensor of column sums, so the weight is read with its two tap axes swapped.
    rows_t = build(aten.permute.default, rows, [1, 0])  # [H, kh]
    cols_t = rows_t if cols is rows else build(aten.permute.default, cols, [1, 0])  # [W, kw]
    column_sums = build(aten.mm.default, _viewed(build, x, [-1, wd]), cols_t)  # [N·C·H, kw]
    by_tap = build(aten.permute.default, build(aten.view.default, column_sums, [-1, c, h, kw]), [0, 1, 3, 2])
    sums = build(aten.mm.default, _viewed(build, by_tap, [-1, h]), rows_t)  # by_tap: [N, C, kw, H]; sums [N·C·kw, kh]
    swapped = build(aten.permute.default, w, [0, 1, 3, 2])  # [O, C, kw, kh]
    weight = build(aten.div.Tensor, _viewed(build, swapped, [o, c * kw * kh]), ho * wo)
    return build(aten.linear.default, build(aten.view.default, sums, [-1, c * kw * kh]), weight, m["b"])


def _unsqueezed(build: Builder, y):
    return build(aten.unsqueeze.default, build(aten.unsqueeze.default, y, -1), -1)


GUARDS = (sole_use("conv"), plain_conv, state("w"), bias_is_state, cheaper)


def _conv_transpose() -> Op:
    return Op("aten.conv_transpose2d.input", bind="conv", input="x", weight="w", bias="b", stride="stride",
              padding="padding", output_padding="output_padding", groups="groups", dilation="dilation")


@guard("the transposed convolution is 2-D on a batch, with dilation 1 and one group")
def plain_conv_transpose(m: Match) -> bool:
    x, w = value(m["x"]), value(m["w"])
    return (x is not None and x.dim() == 4 and x.is_floating_point() and w is not None and w.dim() == 4
            and _pair(m["dilation"]) == (1, 1) and m["groups"] == 1
            and all(isinstance(s, int) for s in x.shape[1:]))


TRANSPOSED_GUARDS = (sole_use("conv"), plain_conv_transpose, state("w"), bias_is_state, cheaper)


@rule(FAMILY, Op("aten.mean.dim", self=_conv_transpose(), dim="dims", keepdim="keepdim"),
      Guard("the mean is over both spatial axes", lambda m: reduced_axes(m) == [2, 3]), *TRANSPOSED_GUARDS)
def spatial_mean_of_conv_transpose(m: Match, build: Builder):
    """mean_{i,j} conv_transpose(x, W, b)_o = b_o + Σ_{c,p,q} W[c,o,p,q]·S[c,p,q]/(Ho·Wo), S = landing sums of x

    S[c, p, q] sums the input pixels whose tap (p, q) lands inside the output: all of them but at the borders
    that the padding crops.
    """
    y = _pooled(m, build)
    return _unsqueezed(build, y) if m["keepdim"] else y


@rule(FAMILY, Op("aten.adaptive_avg_pool2d.default", self=_conv(), output_size="size"),
      Guard("the pool's output is 1×1", lambda m: list(m["size"]) == [1, 1]), *GUARDS)
def global_average_pool_of_conv(m: Match, build: Builder):
    """avgpool_1×1(conv(x, W, b))_o = b_o + Σ_{c,p,q} W[o,c,p,q]·S[c,p,q]/(Ho·Wo), S = window sums of x

    S[c, p, q] sums the input pixels that tap (p, q) reads, exact at the zero-padded borders.
    """
    return _unsqueezed(build, _pooled(m, build))


@rule(FAMILY, Op("aten.mean.dim", self=_conv(), dim="dims", keepdim="keepdim"),
      Guard("the mean is over both spatial axes", lambda m: reduced_axes(m) == [2, 3]), *GUARDS)
def spatial_mean_of_conv(m: Match, build: Builder):
    """mean_{i,j} conv(x, W, b)_o = b_o + Σ_{c,p,q} W[o,c,p,q]·S[c,p,q]/(Ho·Wo), S = window sums of x

    The same identity as the global average pool, written as a mean over the spatial axes.
    """
    y = _pooled(m, build)
    return _unsqueezed(build, y) if m["keepdim"] else y
