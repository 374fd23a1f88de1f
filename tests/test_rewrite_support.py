"""Helpers for the rewrite tests: capture a tiny module, rewrite it, compare graphs, check in float64.

(No tests here; the rule tests import these helpers.)
"""

import copy
import itertools
import types

import torch
from torch import fx, nn

from fuseforge.capture import Captured, capture
from fuseforge.evaluate.cpu_check import run_plan
from fuseforge.load import LoadedModel
from fuseforge.partition import partition
from fuseforge.rewrite import RULES, RewriteContext, declined_by, rewrite
from fuseforge.rewrite.pattern import arguments


def loaded(model: nn.Module, *inputs) -> LoadedModel:
    return LoadedModel(path=types.SimpleNamespace(name="t.py", stem="t"), source="", module=None, model=model,
                       init_args=[], inputs=list(inputs), outputs=[], output_is_tuple=False)


def captured(model: nn.Module, *inputs) -> Captured:
    return capture(loaded(model, *inputs))


def rewritten(model: nn.Module, *inputs):
    """(the rewritten Captured, the rewrite log)."""
    c = captured(model, *inputs)
    return c, rewrite(c.graph, c)


def ops(c: Captured) -> list[str]:
    return [str(n.target).split(".")[1] if "." in str(n.target) else str(n.target)
            for n in c.graph.nodes if n.op == "call_function"]


def fired(log) -> list[str]:
    return [f.rule for f in log.firings]


def _expr(value, c: Captured) -> str:
    if isinstance(value, fx.Node):
        if value.op == "placeholder":
            return c.state_names.get(value.name, value.name)
        if value.target.__name__ == "getitem":
            return f"{_expr(value.args[0], c)}[{value.args[1]}]"
        args = arguments(value)
        inner = ", ".join(f"{k}={_expr(v, c)}" for k, v in args.items())
        return f"{str(value.target).removeprefix('aten.')}({inner})"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_expr(v, c) for v in value) + "]"
    return repr(value)


def expression(c: Captured) -> list[str]:
    """Each output as one expression over state names and inputs, arguments by schema name."""
    return [_expr(c.node(name), c) for name in c.user_outputs]


def assert_rewrites_to(before: nn.Module, expected: nn.Module, *inputs, rules: list[str]):
    """Before, rewritten, is the Expected module's graph; exactly `rules` fired, in this order."""
    c, log = rewritten(before, *inputs)
    assert fired(log) == rules
    assert expression(c) == expression(captured(expected, *inputs))
    c.graph.lint()
    return c


def assert_does_not_fire(model: nn.Module, *inputs, rule, at: str, because: str, unchanged: bool = True,
                         others: frozenset = frozenset()):
    """The rule declines at node `at` for the reason given; with `unchanged`, no rule fires at all but the
    rules named in `others` (rules of another concern that the model also triggers)."""
    c = captured(model, *inputs)
    assert declined_by(rule, c.node(at), RewriteContext.of(c)) == because
    before = ops(c)
    log = rewrite(c.graph, c)
    assert rule.name not in fired(log)
    if unchanged:
        assert [r for r in fired(log) if r not in others] == []
        if not fired(log):
            assert ops(c) == before
    return c, log


def randomised(model: nn.Module, seed: int, scale: float) -> nn.Module:
    """A float64 copy with random signed parameters and buffers."""
    g = torch.Generator().manual_seed(seed)
    model = copy.deepcopy(model).double()
    with torch.no_grad():
        for t in itertools.chain(model.parameters(), model.buffers()):
            if t.is_floating_point():
                t.copy_(torch.randn(t.shape, generator=g, dtype=t.dtype) * scale)
    return model


def assert_float64_equal(model: nn.Module, c: Captured, example_inputs, seed: int, batch: int, scale: float,
                         tolerance: float = 1e-10):
    """The (rewritten) graph, partitioned and run in float64, equals the module on random data."""
    model = randomised(model, seed, scale)
    g = torch.Generator().manual_seed(seed + 1)
    inputs = []
    for x in example_inputs:
        shape = (batch, *x.shape[1:]) if c.dynamic_batch else x.shape
        inputs.append(torch.randn(shape, generator=g, dtype=torch.float64) * scale)
    state = {k: v.detach() for k, v in model.state_dict(keep_vars=True).items()}
    with torch.no_grad():
        got, _ = run_plan(c, partition(c.graph), state, inputs)
        want = model(*inputs)
    want = list(want) if isinstance(want, (list, tuple)) else [want]
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        err = ((a - b).norm() / b.norm().clamp_min(1e-300)).item()
        assert err <= tolerance, f"relative error {err:.2e}"


__all__ = ["RULES", "assert_does_not_fire", "assert_float64_equal", "assert_rewrites_to", "captured", "expression",
           "fired", "loaded", "ops", "randomised", "rewritten"]
