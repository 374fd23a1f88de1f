"""Patterns over the captured graph: `Op(target..., bind=..., argument=sub-pattern or name)`.

A pattern matches one node and, through its arguments (by schema name, defaults filled in), the nodes
that feed it. A string in place of a sub-pattern binds the argument's value to that name; binding the
same name twice requires the same value (so `Op("aten.sub.Tensor", self="x", other="x")` is `x - x`).
"""

from __future__ import annotations

import operator
from typing import Protocol

import torch
from torch import fx


class Match:
    """The root node, the rewrite context and the names a pattern bound."""

    def __init__(self, root: fx.Node, ctx):
        self.root = root
        self.ctx = ctx
        self.bound: dict[str, object] = {}

    def __getitem__(self, name: str):
        return self.bound[name]

    def bind(self, name: str, value) -> bool:
        if name in self.bound:
            old = self.bound[name]
            return old is value if isinstance(value, fx.Node) or isinstance(old, fx.Node) else old == value
        self.bound[name] = value
        return True


class Pattern(Protocol):
    def match(self, value, m: Match) -> bool: ...


def arguments(node: fx.Node) -> dict[str, object]:
    """The node's arguments by schema name, defaults filled in (empty for non-ATen targets)."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return {}
    given = {}
    for i, arg in enumerate(target._schema.arguments):
        if i < len(node.args) and not arg.kwarg_only:
            given[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            given[arg.name] = node.kwargs[arg.name]
        else:
            given[arg.name] = arg.default_value if arg.has_default_value() else None
    return given


def is_op(node, *targets: str) -> bool:
    return isinstance(node, fx.Node) and node.op == "call_function" and str(node.target) in targets


class Op:
    """A call of one of `targets` (any ATen op or tuple access when none is given)."""

    def __init__(self, /, *targets: str, bind: str | None = None, **args):
        self.targets = frozenset(targets)
        self.bind = bind
        self.args = args

    def match(self, value, m: Match) -> bool:
        if not isinstance(value, fx.Node) or value.op != "call_function":
            return False
        if self.targets and str(value.target) not in self.targets:
            return False
        if not isinstance(value.target, torch._ops.OpOverload) and value.target is not operator.getitem:
            return False
        if self.bind and not m.bind(self.bind, value):
            return False
        if not self.args:
            return True
        given = arguments(value)
        for name, sub in self.args.items():
            if name not in given:
                return False
            if isinstance(sub, str):
                if not m.bind(sub, given[name]):
                    return False
            elif not sub.match(given[name], m):
                return False
        return True


class Item:
    """Tuple access `of[index]` (operator.getitem) of a node that `of` matches."""

    def __init__(self, index: int, of: Pattern):
        self.index = index
        self.of = of

    def match(self, value, m: Match) -> bool:
        if not isinstance(value, fx.Node) or value.op != "call_function" or value.target is not operator.getitem:
            return False
        return value.args[1] == self.index and self.of.match(value.args[0], m)
