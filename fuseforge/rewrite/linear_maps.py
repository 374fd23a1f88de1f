"""Family `linear maps`: reductions through linear layers, and linear layers that compose.

`linear(x, W, b)` and `matmul(x, B)` (B a matrix; W = Bᵀ) are both read as y = x·Wᵀ + b. The
parameter-derived constants these rules create (Σ_j W_j, W2·W1, W2·b1 + b2) are plain ATen ops on the
parameters inside the graph: they are recomputed in every forward from the live parameters, so training
and `load_state_dict` keep working.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import fx

from .engine import Builder, guard, is_state, rule, value
from .guards import hint, keeps_dtype, reduced_axes, rows, sole_use
from .pattern import Match, arguments, is_op

aten = torch.ops.aten
FAMILY = "linear maps"
SUM_OR_MEAN = ("aten.sum.dim_IntList", "aten.mean.dim")


def untransposed(node: fx.Node) -> fx.Node | None:
    """z when `node` is a matrix transpose of z (permute [1, 0], t, transpose 0 1)."""
    if is_op(node, "aten.permute.default") and list(node.args[1]) in ([1, 0], [-1, -2], [1, -2], [-1, 0]):
        return node.args[0]
    if is_op(node, "aten.t.default") and value(node).dim() == 2:
        return node.args[0]
    if is_op(node, "aten.transpose.int") and value(node).dim() == 2 and {d % 2 for d in node.args[1:3]} == {0, 1}:
        return node.args[0]
    return None


@dataclass(frozen=True)
class LinearForm:
    """y = x·Wᵀ + b, from aten.linear (W as stored) or aten.matmul/mm (stored as B = Wᵀ)."""

    node: fx.Node
    x: fx.Node
    stored: fx.Node  # W for linear, B for matmul
    bias: fx.Node | None
    transposed: bool

    def weight(self, build: Builder) -> fx.Node:
        """W, [out_features, in_features]."""
        if not self.transposed:
            return self.stored
        return untransposed(self.stored) or build(aten.permute.default, self.stored, [1, 0])

    @property
    def sizes(self) -> tuple[int, int, int]:
        """(rows, in_features, out_features) at the traced sizes."""
        shape = value(self.node).shape
        return rows(self.x), hint(value(self.x).shape[-1]), hint(shape[-1])


def linear_form(node) -> LinearForm | None:
    if not is_op(node, "aten.linear.default", "aten.matmul.default", "aten.mm.default"):
        return None
    val = value(node)
    if val is None or not val.is_floating_point():
        return None
    args = arguments(node)
    if str(node.target) == "aten.linear.default":
        x, w, b = args["input"], args["weight"], args["bias"]
        return LinearForm(node, x, w, b, False) if value(w) is not None and value(w).dim() == 2 else None
    x, w = args["self"], args["other"] if "other" in args else args["mat2"]
    if value(x) is None or value(x).dim() < 2 or value(w) is None or value(w).dim() != 2:
        return None
    return LinearForm(node, x, w, None, True)


class LinearMap:
    """Pattern: a linear layer or a product with a matrix, bound as a `LinearForm`."""

    def __init__(self, bind: str, x=None):
        self.bind, self.x = bind, x

    def match(self, v, m: Match) -> bool:
        form = linear_form(v)
        if form is None or (self.x is not None and not self.x.match(form.x, m)):
            return False
        return m.bind(self.bind, form)


def weights_are_state(name: str):
    def holds(m: Match) -> bool:
        f = m[name]
        return is_state(f.stored, m.ctx) and (f.bias is None or is_state(f.bias, m.ctx))
    return guard(f"`{name}`'s weight and bias are parameters or buffers, or computed from them alone")(holds)


@guard("only the last (feature) axis is reduced")
def reduces_features(m: Match) -> bool:
    return reduced_axes(m) == [value(m.root.args[0]).dim() - 1]


class _Reduction:
    """Pattern: a sum or mean over some axes of `self`."""

    def __init__(self, self_pattern):
        self.inner = self_pattern

    def match(self, v, m: Match) -> bool:
        if not is_op(v, *SUM_OR_MEAN):
            return False
        args = arguments(v)
        return self.inner.match(args["self"], m) and m.bind("dims", args["dim"]) and m.bind("keepdim", args["keepdim"])


@rule(FAMILY, _Reduction(LinearMap("lin")), sole_use("lin"), weights_are_state("lin"), reduces_features,
      keeps_dtype)
def reduce_the_weight_not_the_output(m: Match, build: Builder):
    """Σ_j (x·Wᵀ + b)_j = x·(Σ_j W_j)ᵀ + Σ_j b_j, and the same for the mean

    A GEMM followed by a row reduction becomes one matrix-vector product with the pre-reduced weight
    (recomputed from the parameter in every forward).
    """
    lin, red = m["lin"], m.root.target
    w_reduced = build(red, lin.weight(build), [0], True)  # [1, in_features]
    if lin.bias is None:
        out = build(aten.linear.default, lin.x, w_reduced)  # [..., 1]
    else:
        out = build(aten.linear.default, lin.x, w_reduced, build(red, lin.bias, [0], True))
    return out if m["keepdim"] else build(aten.squeeze.dims, out, [-1])


def _composed_cost(inner: LinearForm, outer: LinearForm) -> tuple[float, float]:
    """FLOPs of (two products, the composed product including W2·W1 every forward)."""
    m, k, h = inner.sizes
    n = outer.sizes[2]
    return 2.0 * m * h * (k + n), 2.0 * n * h * k + 2.0 * m * k * n + 2.0 * n * h


@guard("composing is cheaper at the traced sizes, counting W2·W1 in every forward")
def composing_is_cheaper(m: Match) -> bool:
    before, after = _composed_cost(m["inner"], m["outer"])
    return after < before


@rule(FAMILY, LinearMap("outer", x=LinearMap("inner")), sole_use("inner"), weights_are_state("inner"),
      weights_are_state("outer"), composing_is_cheaper)
def compose_linear_maps(m: Match, build: Builder):
    """(x·W1ᵀ + b1)·W2ᵀ + b2 = x·(W2·W1)ᵀ + (W2·b1 + b2)

    Two linear maps with nothing between them are one, with the composed weight computed from the
    parameters in every forward; only where that is cheaper than the two products.
    """
    inner, outer = m["inner"], m["outer"]
    w2 = outer.weight(build)
    weight = build(aten.mm.default, w2, inner.weight(build))
    bias = outer.bias
    if inner.bias is not None:
        bias = build(aten.linear.default, inner.bias, w2, *([outer.bias] if outer.bias is not None else []))
    return build(aten.linear.default, inner.x, weight, *([bias] if bias is not None else []))
