"""The rewrite engine: rules with named guards, applied in a fixed order to a fixpoint.

A `Rule` is a pattern rooted at one node, named guards (each a sentence that must hold), and a build
function whose docstring's first line is the identity it applies; the build returns the node that
replaces the root, or None to decline. `rewrite` runs the rules in the order given, each over every
node, round after round, until a round changes nothing. Dead code is removed after every firing, so a
"has no other use" guard sees the graph as it is. New nodes carry FakeTensor metadata computed from
their inputs' (symbolic batch sizes survive), and a replaced graph output keeps its name, so the
`Captured` fields that name outputs and buffer updates stay valid.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import fx
from torch._guards import detect_fake_mode
from torch.utils import _pytree as pytree

from ..cost import VIEW_OPS, flops, op_bytes
from .pattern import Match, Pattern

ALL = "all inputs and parameters"
aten = torch.ops.aten


@dataclass(frozen=True)
class RewriteContext:
    """What the graph alone does not say: which placeholders hold the model's state."""

    parameters: frozenset[str] = frozenset()
    buffers: frozenset[str] = frozenset()

    @classmethod
    def of(cls, source) -> RewriteContext:
        """From None, a RewriteContext, or a `Captured` (its parameter and buffer placeholders)."""
        if source is None or isinstance(source, RewriteContext):
            return source or cls()
        params = frozenset(source.parameter_placeholders)
        return cls(params, frozenset(source.state_names) - params)

    @property
    def state(self) -> frozenset[str]:
        return self.parameters | self.buffers


@dataclass(frozen=True)
class Guard:
    says: str  # the condition, as a sentence
    holds: Callable[[Match], bool]


def guard(says: str) -> Callable[[Callable[[Match], bool]], Guard]:
    return lambda fn: Guard(says, fn)


@dataclass(frozen=True)
class Rule:
    name: str
    family: str
    pattern: Pattern
    guards: tuple[Guard, ...]
    build: Callable[[Match, Builder], fx.Node | None]
    scope: str  # ALL, or the condition under which the identity holds

    @property
    def identity(self) -> str:
        return (self.build.__doc__ or self.name).strip().splitlines()[0]


def rule(family: str, pattern: Pattern, *guards: Guard, scope: str = ALL):
    """Decorator: the function builds the replacement; its docstring's first line is the identity."""
    return lambda build: Rule(build.__name__, family, pattern, guards, build, scope)


def fake_value(graph: fx.Graph, op, args: tuple, kwargs: dict):
    """The op's result on its inputs' FakeTensors, under the graph's fake mode."""
    vals = fx.node.map_arg((args, kwargs), lambda n: n.meta.get("val"))
    mode = detect_fake_mode([v for v in pytree.tree_leaves(vals) if isinstance(v, torch.Tensor)])
    if mode is None:
        mode = detect_fake_mode([n.meta.get("val") for n in graph.nodes if n.op == "placeholder"])
    if mode is None:  # a graph without FakeTensor metadata
        return None
    with mode:
        return op(*vals[0], **vals[1])


class Builder:
    """Creates nodes before the root, with metadata; `build(aten.sum.dim_IntList, w, [0], True)`."""

    def __init__(self, graph: fx.Graph, root: fx.Node):
        self.graph, self.root = graph, root
        self.created: list[fx.Node] = []

    def __call__(self, op, *args, **kwargs) -> fx.Node:
        with self.graph.inserting_before(self.root):
            node = self.graph.create_node("call_function", op, tuple(args), kwargs, name=str(op).split(".")[-2])
        node.meta["val"] = fake_value(self.graph, op, tuple(args), kwargs)
        self.created.append(node)
        return node

    def discard(self) -> None:
        for node in reversed(self.created):
            self.graph.erase_node(node)
        self.created.clear()


def is_state(node, ctx: RewriteContext) -> bool:
    """A parameter or buffer, or a value computed from them alone by deterministic ops."""
    if not isinstance(node, fx.Node):
        return False
    if node.op == "placeholder":
        return node.name in ctx.state
    if node.op != "call_function" or not node.all_input_nodes:
        return False
    if isinstance(node.target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in node.target.tags:
        return False
    return all(is_state(a, ctx) for a in node.all_input_nodes)


def value(node) -> torch.Tensor | None:
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


@dataclass(frozen=True)
class Firing:
    rule: str
    identity: str
    scope: str
    node: str  # the root that was replaced
    flops_removed: float  # per forward, at the traced sizes
    bytes_removed: int  # memory traffic (inputs read + outputs written by each op), same sizes


@dataclass
class RewriteLog:
    firings: list[Firing] = field(default_factory=list)
    dead_removed: int = 0  # ops that were dead before any rule fired

    @property
    def fired(self) -> list[tuple[str, str]]:
        """(identity, node) of each firing, in order."""
        return [(f.identity, f.node) for f in self.firings]


def work(graph: fx.Graph) -> tuple[float, int]:
    """(FLOPs, bytes moved) of the graph, as the cost model counts eager ops."""
    total_flops, moved = 0.0, 0
    for node in graph.nodes:
        if node.op != "call_function" or str(node.target) in VIEW_OPS or value(node) is None:
            continue
        total_flops += flops(node)[0]
        moved += op_bytes(node)
    return total_flops, moved


def declined_by(r: Rule, node: fx.Node, ctx: RewriteContext) -> str | None:
    """Why the rule does not fire at `node` (the first failing guard), or None if it would fire."""
    m = Match(node, ctx)
    if not r.pattern.match(node, m):
        return "the pattern does not match"
    return next((g.says for g in r.guards if not g.holds(m)), None)


def _same_type(a, b) -> bool:
    if a is None or b is None:  # no metadata to compare
        return True
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return type(a) is type(b)
    return a.dtype == b.dtype and [str(s) for s in a.shape] == [str(s) for s in b.shape]


def _replace(graph: fx.Graph, root: fx.Node, new: fx.Node, build: Builder) -> None:
    """Root's uses read `new`; a graph output keeps its name (an alias where `new` cannot take it)."""
    name = root.name
    is_output = any(u.op == "output" for u in root.users)
    if is_output and new not in build.created and (
            new.op != "call_function" or any(u.op == "output" for u in new.users)):
        new = build(aten.alias.default, new)
    root.replace_all_uses_with(new)
    graph.erase_node(root)
    if is_output:
        new.name = name  # the old name stays reserved in the graph's namespace


def apply(r: Rule, graph: fx.Graph, node: fx.Node, ctx: RewriteContext) -> Firing | None:
    m = Match(node, ctx)
    if not r.pattern.match(node, m) or not all(g.holds(m) for g in r.guards):
        return None
    before = work(graph)
    build = Builder(graph, node)
    new = r.build(m, build)
    if new is None or new is node:
        build.discard()
        return None
    if not _same_type(node.meta.get("val"), new.meta.get("val")):
        raise RuntimeError(f"rule {r.name} changed the value at {node.name}: "
                           f"{node.meta.get('val')} -> {new.meta.get('val')}")
    name = node.name
    _replace(graph, node, new, build)
    graph.eliminate_dead_code()
    after = work(graph)
    return Firing(r.name, r.identity, r.scope, name, before[0] - after[0], before[1] - after[1])


def run_rules(graph: fx.Graph, rules: list[Rule], ctx: RewriteContext, max_rounds: int = 50) -> RewriteLog:
    log = RewriteLog()
    before = len(graph.nodes)
    graph.eliminate_dead_code()
    log.dead_removed = before - len(graph.nodes)
    for _ in range(max_rounds):
        changed = False
        for r in rules:
            for node in list(graph.nodes):
                if getattr(node, "_erased", False) or node.op != "call_function":
                    continue
                firing = apply(r, graph, node, ctx)
                if firing is not None:
                    log.firings.append(firing)
                    changed = True
        if not changed:
            graph.lint()
            return log
    raise RuntimeError(f"rewrite did not reach a fixpoint in {max_rounds} rounds")
