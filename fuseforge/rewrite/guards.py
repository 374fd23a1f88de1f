"""Guards shared by the rule families; each is named by the sentence it checks."""

from __future__ import annotations

import math

import torch
from torch import fx

from ..traced import size_hint
from .engine import Guard, is_state, value
from .pattern import Match


def _node(v) -> fx.Node:
    return getattr(v, "node", v)  # a bound LinearForm stands for its node


def sole_use(name: str) -> Guard:
    return Guard(f"`{name}` has no other use", lambda m: len(_node(m[name]).users) == 1)


def state(name: str) -> Guard:
    return Guard(f"`{name}` is a parameter or buffer, or computed from them alone",
                 lambda m: is_state(m[name], m.ctx))


def scalar(name: str) -> Guard:
    return Guard(f"`{name}` is a Python number",
                 lambda m: isinstance(m[name], (int, float)) and not isinstance(m[name], bool))


def floating(name: str) -> Guard:
    def holds(m: Match) -> bool:
        val = value(_node(m[name]))
        return val is not None and val.is_floating_point()
    return Guard(f"`{name}` is a floating-point tensor", holds)


keeps_dtype = Guard("the result has the dtype of the reduced tensor",
                    lambda m: value(m.root) is not None and value(m.root).dtype == value(m.root.args[0]).dtype)


def reduced_axes(m: Match, name: str = "dims") -> list[int] | None:
    """The root's reduction axes as non-negative ints (None: all axes)."""
    dims = m[name]
    rank = value(m.root.args[0]).dim()
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return None
    dims = [dims] if isinstance(dims, int) else dims
    return sorted({d % rank if rank else 0 for d in dims})


def static(size) -> int | None:
    return size if isinstance(size, int) else None


hint = size_hint  # a size as traced (the example value of a symbolic size)


def hint_numel(shape) -> int:
    return math.prod(hint(s) for s in shape)


def rows(node: fx.Node) -> int:
    """Rows of a matrix product's input: its number of elements over the last axis (traced sizes)."""
    shape = value(node).shape
    return hint_numel(shape[:-1])


def is_float_tensor(node) -> bool:
    val = value(node)
    return isinstance(val, torch.Tensor) and val.is_floating_point()
