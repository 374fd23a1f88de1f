"""The rewrite engine: order and fixpoint, names of outputs, metadata, context, the log and its artefact."""

import pytest
import torch
from test_rewrite_support import assert_float64_equal, captured, fired, ops, rewritten
from torch import nn

from fuseforge.capture import format_captured
from fuseforge.rewrite import ALL, RULES, format_rewrite, rewrite
from fuseforge.rewrite.engine import Guard, rule, value
from fuseforge.rewrite.pattern import Op

X = torch.randn(6, 8)
aten = torch.ops.aten


class RowSum(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 16)

    def forward(self, x):
        return self.fc(x).sum(-1)


def test_a_replaced_graph_output_keeps_its_name_and_its_symbolic_batch_size():
    c, log = rewritten(RowSum(), X)
    assert fired(log) == ["reduce_the_weight_not_the_output"]
    out = c.node(c.user_outputs[0])
    assert out.name == "sum_1" and str(out.target) == "aten.squeeze.dims"
    assert str(value(out).shape[0]).startswith("s")  # still symbolic
    assert_float64_equal(RowSum(), c, [X], seed=0, batch=3, scale=1.0)


class SizeOneSum(nn.Module):
    def forward(self, x):
        return x.sum(1, keepdim=True)


def test_an_output_replaced_by_an_input_becomes_an_alias_with_the_output_s_name():
    c, log = rewritten(SizeOneSum(), torch.randn(6, 1, 4))
    assert ops(c) == ["alias"] and c.user_outputs == ["sum_1"]
    assert_float64_equal(SizeOneSum(), c, [torch.randn(6, 1, 4)], seed=1, batch=2, scale=1.0)


def test_without_a_context_rules_that_need_a_parameter_do_not_fire():
    c = captured(RowSum(), X)
    before = ops(c)
    assert rewrite(c.graph).firings == [] and ops(c) == before


class TwoLayersSummed(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 32), nn.Linear(32, 16)

    def forward(self, x):
        return self.b(self.a(x)).sum(-1, keepdim=True)


def test_rules_run_to_a_fixpoint_a_row_sum_of_two_layers_becomes_one_matrix_vector_product():
    c, log = rewritten(TwoLayersSummed(), X)
    assert fired(log) == ["reduce_the_weight_not_the_output", "compose_linear_maps"]
    (product,) = [n for n in c.graph.nodes if n.op == "call_function" and n.args and n.args[0].name == "x"]
    assert str(product.target) == "aten.linear.default" and list(value(product.args[1]).shape) == [1, 8]
    assert_float64_equal(TwoLayersSummed(), c, [X], seed=2, batch=4, scale=1.0)


def test_the_log_and_the_artefact_give_each_identity_its_scope_and_the_work_removed():
    c, log = rewritten(RowSum(), X)
    (firing,) = log.firings
    assert firing.node == "sum_1" and firing.scope == ALL and firing.flops_removed > 0
    assert log.fired == [(firing.identity, "sum_1")]  # the (identity, node) pairs the report reads
    text = format_rewrite(log, format_captured(c))
    assert firing.identity in text and "holds for all inputs and parameters" in text and "GFLOP" in text


def test_every_rule_states_an_identity_a_family_and_a_scope():
    for r in RULES:
        assert r.identity and r.identity != r.name and r.family and r.scope, r.name
    assert len({r.name for r in RULES}) == len(RULES)


class Tanh(nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 2


def test_a_rule_that_declines_after_building_leaves_no_node_behind():
    @rule("test", Op("aten.tanh.default", self="x"))
    def builds_then_declines(m, build):
        """tanh(x) = tanh(x)"""
        build(aten.neg.default, m["x"])
        return None

    c = captured(Tanh(), X)
    before = ops(c)
    assert rewrite(c.graph, c, rules=[builds_then_declines]).firings == [] and ops(c) == before


def test_a_rule_that_changes_the_value_s_shape_is_a_bug_and_raises():
    @rule("test", Op("aten.tanh.default", self="x"), Guard("always", lambda m: True))
    def wrong_shape(m, build):
        """tanh(x) = sum(x)"""
        return build(aten.sum.dim_IntList, m["x"], [1], True)

    c = captured(Tanh(), X)
    with pytest.raises(RuntimeError, match="changed the value"):
        rewrite(c.graph, c, rules=[wrong_shape])
