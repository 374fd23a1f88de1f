"""Family `identities`: work that cannot change the value (size-1 reductions, range-keeping activations,
views that come back to their shape, common subexpressions)."""

from __future__ import annotations

import math
import operator

import torch
from torch import fx

from .engine import Builder, Guard, guard, rule, value
from .guards import keeps_dtype, reduced_axes, static
from .pattern import Match, Op, arguments

aten = torch.ops.aten
FAMILY = "identities"
REDUCTIONS = ("aten.sum.dim_IntList", "aten.mean.dim", "aten.amax.default", "aten.amin.default")


@guard("every reduced axis has size 1")
def size_one_axes(m: Match) -> bool:
    axes = reduced_axes(m)
    shape = value(m["x"]).shape
    return axes is not None and all(static(shape[a]) == 1 for a in axes)


@rule(FAMILY, Op(*REDUCTIONS, self="x", dim="dims", keepdim="keepdim"), size_one_axes, keeps_dtype)
def reduction_over_size_one_axes(m: Match, build: Builder):
    """reduce(x, axes) = x when every reduced axis has size 1 (squeezed away unless keepdim)

    For sum, mean, amax and amin: each output element is the one input element of its window. So
    `x - x.mean(dim, keepdim=True)` over a size-1 axis becomes `x - x`, one pointwise op.
    """
    if m["keepdim"]:
        return m["x"]
    return build(aten.squeeze.dims, m["x"], reduced_axes(m))


INF = math.inf
_NON_NEGATIVE = ("aten.relu.default", "aten.exp.default", "aten.abs.default", "aten.sqrt.default",
                 "aten.rsqrt.default")
_UNIT = ("aten.sigmoid.default", "aten.hardsigmoid.default", "aten.softmax.int", "aten._softmax.default")


def _number(v, default: float) -> float | None:
    if v is None:
        return default
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def clamp_bounds(node: fx.Node) -> tuple[float, float] | None:
    """[lo, hi] that relu, clamp, clamp_min and hardtanh clamp to (None: a bound is a tensor)."""
    key, args = str(node.target), arguments(node)
    if key == "aten.relu.default":
        return 0.0, INF
    if key == "aten.clamp.default":
        lo, hi = _number(args["min"], -INF), _number(args["max"], INF)
    elif key == "aten.clamp_min.default":
        lo, hi = _number(args["min"], -INF), INF
    elif key == "aten.hardtanh.default":
        lo, hi = _number(args["min_val"], -INF), _number(args["max_val"], INF)
    else:
        return None
    return None if lo is None or hi is None else (lo, hi)


def value_range(node) -> tuple[float, float] | None:
    """Bounds that every non-NaN element of the node's value lies in, known from the op alone."""
    if not isinstance(node, fx.Node) or node.op != "call_function":
        return None
    key = str(node.target)
    if key in _NON_NEGATIVE:
        return 0.0, INF
    if key in _UNIT:
        return 0.0, 1.0
    if key == "aten.tanh.default":
        return -1.0, 1.0
    if key == "aten.pow.Tensor_Scalar":
        e = arguments(node)["exponent"]
        if isinstance(e, (int, float)) and float(e).is_integer() and int(e) % 2 == 0 and e > 0:
            return 0.0, INF
        return None
    return clamp_bounds(node)


@guard("`x` already lies within the op's bounds")
def within_bounds(m: Match) -> bool:
    have, limits = value_range(m["x"]), clamp_bounds(m.root)
    return have is not None and limits is not None and limits[0] <= have[0] and have[1] <= limits[1]


_CLAMPS = ("aten.relu.default", "aten.clamp.default", "aten.clamp_min.default", "aten.hardtanh.default")


@rule(FAMILY, Op(*_CLAMPS, self="x"), within_bounds, keeps_dtype)
def clamp_within_range(m: Match, build: Builder):
    """clamp(x, lo, hi) = x when x cannot leave [lo, hi] (relu after relu or sigmoid, clamp after tanh)

    NaN stays NaN on both sides (torch's relu, clamp and hardtanh propagate it).
    """
    return m["x"]


_VIEWS = ("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default", "aten.unsqueeze.default",
          "aten.squeeze.dim", "aten.squeeze.dims", "aten.flatten.using_ints")


def view_chain_start(node: fx.Node) -> fx.Node:
    """The first value of the chain of shape-only views that ends in `node`."""
    while isinstance(node, fx.Node) and node.op == "call_function" and str(node.target) in _VIEWS:
        node = node.args[0]
    return node


@guard("the chain of views ends in the shape it started from")
def returns_to_its_shape(m: Match) -> bool:
    start, end = value(view_chain_start(m.root)), value(m.root)
    return start is not None and end is not None and [str(s) for s in start.shape] == [str(s) for s in end.shape]


@rule(FAMILY, Op(*_VIEWS), returns_to_its_shape)
def views_that_cancel(m: Match, build: Builder):
    """reshape(…reshape(x)…) = x when the chain of reshapes ends in x's shape

    Reshapes, flattens, squeezes and unsqueezes keep the row-major order of the elements.
    """
    return view_chain_start(m.root)


@guard("`x` is a value the graph computes, read by nothing but this copy, in no particular memory format")
def fresh_and_unshared(m: Match) -> bool:
    x = m["x"]
    return (isinstance(x, fx.Node) and x.op == "call_function" and len(x.users) == 1
            and m["memory_format"] in (None, torch.preserve_format))


@rule(FAMILY, Op("aten.clone.default", self="x", memory_format="memory_format"), fresh_and_unshared)
def copy_of_a_fresh_value(m: Match, build: Builder):
    """clone(x) = x when nothing else reads x (a constant built in forward, copied by the trace)

    The graph is functional: no op writes x afterwards, so the copy and the original hold the same values.
    """
    return m["x"]


@guard("the detached value is no output of the forward")
def not_an_output(m: Match) -> bool:
    return not any(user.op == "output" for user in m.root.users)


@rule(FAMILY, Op("aten.detach.default", self="x"), not_an_output)
def detach_of_a_value(m: Match, build: Builder):
    """detach(x) = x: the same values; only autograd tells them apart, and the emitted forward runs without it

    (x.clone().detach() in a forward: the copy stays, the detach no longer splits the kernels around it.)
    """
    return m["x"]


def _frozen(v):
    if isinstance(v, (list, tuple)):
        return tuple(_frozen(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _frozen(x)) for k, x in v.items()))
    if isinstance(v, float):
        return ("float", repr(v))  # 0.0 and -0.0 differ; nan equals itself
    return v


def _key(node: fx.Node):
    return node.target, _frozen(node.args), _frozen(node.kwargs)


def _twin(node: fx.Node) -> fx.Node | None:
    key = _key(node)
    for other in node.graph.nodes:
        if other is node:
            return None
        if other.op == "call_function" and other.target is node.target and _key(other) == key:
            return other
    return None


@guard("the op is deterministic (not random)")
def deterministic(m: Match) -> bool:
    t = m.root.target
    if t is aten.alias.default:  # kept only to give a graph output its name
        return False
    return t is operator.getitem or (isinstance(t, torch._ops.OpOverload)
                                     and torch.Tag.nondeterministic_seeded not in t.tags
                                     and not t._schema.is_mutable)


has_twin = Guard("an earlier op computes the same function of the same arguments", lambda m: _twin(m.root) is not None)


@rule(FAMILY, Op(), deterministic, has_twin)
def common_subexpression(m: Match, build: Builder):
    """f(a, b) computed twice = f(a, b) computed once (for deterministic ops)"""
    return _twin(m.root)
