"""Family `views`: a reshape of trailing axes commutes with the pointwise ops after it, and an explicit expand before
a pointwise op is the broadcast the op does anyway.

`x.view(b, c, -1)`, a softmax over the flattened axis, then `.view(b, c, d, h, w) * scale`: the reshape back
splits the row kernel's output from the multiply that should be its epilogue. A pointwise op sees each element
once whatever the shape, so the reshape can move after it, provided its other operands are constant along the
reshaped axes (a per-channel scale, a number): those keep their leading axes and drop the others.
"""

from __future__ import annotations

import torch
from torch import fx

from ..pointwise import is_pointwise
from .engine import Builder, guard, is_state, rule, value
from .pattern import Match, Op, is_op

aten = torch.ops.aten
FAMILY = "views"
RESHAPES = ("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default")


def _prefix(a, b) -> int:
    """How many leading sizes two shapes share (symbolic sizes compared by name)."""
    n = 0
    while n < min(len(a), len(b)) and str(a[n]) == str(b[n]):
        n += 1
    return n


def _moved(m: Match) -> tuple[fx.Node, int, list] | None:
    """(the reshape, its kept leading axes p, the other tensor operands) when the root is a pointwise op whose one
    reshaped operand has the root's shape, and whose other tensor operands are constant along the axes from p on."""
    root = m.root
    out = value(root)
    if out is None or not is_pointwise(root):
        return None
    reshapes = [a for a in root.all_input_nodes if is_op(a, *RESHAPES)]
    if len(set(reshapes)) != 1 or len(reshapes[0].users) != 1:
        return None
    view = reshapes[0]
    if is_state(view.args[0], m.ctx):
        return None  # a weight-side value: computed once per call at its small size, no kernel to join
    y, shaped = value(view.args[0]), value(view)
    if y is None or shaped is None or [str(s) for s in shaped.shape] != [str(s) for s in out.shape]:
        return None
    p = _prefix(y.shape, shaped.shape)
    if p == min(y.dim(), shaped.dim()):
        return None  # no axis of the tail regrouped: nothing to move (views that only add or drop size-1 axes)
    others = [a for a in root.all_input_nodes if a is not view]
    for other in others:
        s = value(other)
        if s is None or s.dim() > out.dim():
            return None
        padded = [1] * (out.dim() - s.dim()) + list(s.shape)
        if any(str(d) != "1" for d in padded[p:]) or not all(isinstance(d, int) for d in padded[:p]):
            return None  # varies along the reshaped axes, or has a symbolic size a new view would need
    return view, p, others


@guard("a pointwise op reads a reshape of a value computed from the inputs that regroups only trailing axes "
       "(read by nothing else), and reads its other tensors constant along those axes")
def reshape_of_trailing_axes(m: Match) -> bool:
    return _moved(m) is not None


@rule(FAMILY, Op(), reshape_of_trailing_axes)
def pointwise_of_a_reshape(m: Match, build: Builder):
    """f(reshape(y), s) = reshape(f(y, s')) when the reshape regroups only trailing axes, along which s is constant

    s' is s with y's trailing axes, each of size 1. A pointwise op computes each element from the elements at its position alone, and a reshape keeps the
    row-major order, so the same values land in the same places; the op then runs in y's shape and can join the
    kernel that computes y.
    """
    view, p, others = _moved(m)
    y = view.args[0]
    rank = value(y).dim()
    swap: dict[fx.Node, fx.Node] = {view: y}
    for other in others:
        s = value(other)
        padded = [1] * (value(m.root).dim() - s.dim()) + list(s.shape)
        swap[other] = build(aten.view.default, other, [*padded[:p], *[1] * (rank - p)])
    return build(view.target, _rebuilt(m.root, swap, build), *view.args[1:], **view.kwargs)


def _rebuilt(root: fx.Node, swap: dict[fx.Node, fx.Node], build: Builder) -> fx.Node:
    """`root`'s op again, each argument in `swap` replaced (inside lists and tuples too)."""
    def replaced(a):
        if isinstance(a, fx.Node):
            return swap.get(a, a)
        if isinstance(a, (list, tuple)):
            return type(a)(replaced(x) for x in a)
        return a

    return build(root.target, *replaced(root.args), **{k: replaced(v) for k, v in root.kwargs.items()})


def _expanded(m: Match) -> fx.Node | None:
    """The expand a pointwise root reads, where another tensor operand already has the root's shape (so the op's own
    broadcast gives the same elements without it)."""
    root = m.root
    out = value(root)
    if out is None or not is_pointwise(root):
        return None
    shape = [str(d) for d in out.shape]
    expands = [a for a in root.all_input_nodes if is_op(a, "aten.expand.default")]
    if not expands:
        return None
    e = expands[0]
    b, expanded = value(e.args[0]), value(e)
    if b is None or expanded is None or [str(d) for d in expanded.shape] != shape or b.dim() > out.dim():
        return None
    full = [a for a in root.all_input_nodes if a is not e and value(a) is not None
            and [str(d) for d in value(a).shape] == shape]
    return e if full else None


@guard("a pointwise op reads an expand to its own shape, and another of its tensors has that shape")
def expand_to_a_full_operand(m: Match) -> bool:
    return _expanded(m) is not None


@rule(FAMILY, Op(), expand_to_a_full_operand)
def pointwise_of_an_expand(m: Match, build: Builder):
    """f(expand(b), a) = f(b, a) when a has f's shape

    A pointwise op broadcasts its operands to one shape; with an operand of the full shape, b reaches every position
    it would reach expanded, with the same values (F.normalize's division by its norm, `x / n.expand_as(x)`); the op
    then reads b at its own size and can join the row kernel that computes b.
    """
    e = _expanded(m)
    return _rebuilt(m.root, {e: e.args[0]}, build)
