"""Stage `rewrite`: algebraic rules applied to a fixpoint (v0: dead-code elimination only).

A rule is a function `rule(graph, node) -> bool` that rewrites the graph around `node` and says whether
it changed anything; its docstring's first line is the identity it applies. Rules run in the listed
order, over all nodes, until none fires. Every firing is logged for the report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from torch import fx

Rule = Callable[[fx.Graph, fx.Node], bool]

RULES: list[Rule] = []  # the algebraic families of the design arrive with their tests


@dataclass
class RewriteLog:
    fired: list[tuple[str, str]] = field(default_factory=list)  # (rule identity, node)
    dead_removed: int = 0


def _identity(rule: Rule) -> str:
    return (rule.__doc__ or rule.__name__).strip().splitlines()[0]


def rewrite(graph: fx.Graph, rules: list[Rule] | None = None, max_rounds: int = 50) -> RewriteLog:
    log = RewriteLog()
    rules = RULES if rules is None else rules
    for _ in range(max_rounds):
        changed = False
        for rule in rules:
            for node in list(graph.nodes):
                if node.graph is graph and rule(graph, node):
                    log.fired.append((_identity(rule), node.name))
                    changed = True
        before = len(graph.nodes)
        graph.eliminate_dead_code()
        log.dead_removed += before - len(graph.nodes)
        if not changed:
            return log
    raise RuntimeError(f"rewrite did not reach a fixpoint in {max_rounds} rounds")


def format_rewrite(log: RewriteLog, captured_text: str) -> str:
    """The `10_rewritten.txt` artefact: what fired, then the graph."""
    head = [f"# {identity}  (at {node})" for identity, node in log.fired] or ["# no rewrite rule fired"]
    head.append(f"# dead ops removed: {log.dead_removed}")
    return "\n".join(head) + "\n" + captured_text
