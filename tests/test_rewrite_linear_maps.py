"""Rewrite family `linear maps`: reductions fold into the weight; stacked linear layers compose."""

import functools

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from test_rewrite_support import assert_does_not_fire, assert_float64_equal, assert_rewrites_to, rewritten
from torch import nn

from fuseforge.rewrite.linear_maps import compose_linear_maps, reduce_the_weight_not_the_output

X = torch.randn(6, 8)
RANDOM = dict(seed=st.integers(0, 2**31 - 1), batch=st.integers(1, 5), scale=st.sampled_from([1e-3, 1.0, 1e3]))


class RowReduction(nn.Module):
    def __init__(self, how="sum", keepdim=True, expected=False):
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.how, self.keepdim, self.expected = how, keepdim, expected

    def forward(self, x):
        if not self.expected:
            y = self.fc(x)
            return y.sum(-1, keepdim=self.keepdim) if self.how == "sum" else y.mean(-1, keepdim=self.keepdim)
        red = torch.sum if self.how == "sum" else torch.mean
        y = F.linear(x, red(self.fc.weight, [0], True), red(self.fc.bias, [0], True))
        return y if self.keepdim else torch.squeeze(y, (-1,))


@pytest.mark.parametrize("how", ["sum", "mean"])
@pytest.mark.parametrize("keepdim", [True, False])
def test_a_row_reduction_of_a_linear_layer_becomes_a_product_with_the_reduced_weight(how, keepdim):
    assert_rewrites_to(RowReduction(how, keepdim), RowReduction(how, keepdim, expected=True), X,
                       rules=["reduce_the_weight_not_the_output"])


class MatmulDivideSum(nn.Module):
    """The seed model's shape: matmul with a transposed parameter, a division, a row sum, a scale."""

    def __init__(self, expected=False):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(16, 8))
        self.expected = expected

    def forward(self, x):
        if self.expected:
            return F.linear(x, torch.sum(self.weight, [0], True)) / 2 * 1.5
        return torch.sum(torch.matmul(x, self.weight.T) / 2, dim=1, keepdim=True) * 1.5


def test_a_scaled_row_sum_of_a_matmul_with_a_transposed_parameter_becomes_one_gemv():
    assert_rewrites_to(MatmulDivideSum(), MatmulDivideSum(expected=True), X,
                       rules=["scalar_out_of_reduction", "reduce_the_weight_not_the_output"])


class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 16)

    def forward(self, x):
        y = self.fc(x)
        return y.sum(-1, keepdim=True) * y


class InputWeight(nn.Module):
    def forward(self, x, w):
        return torch.matmul(x, w).sum(-1)


class ReluBetween(Shared):
    def forward(self, x):
        return torch.relu(self.fc(x)).sum(-1)


class BatchSum(Shared):
    def forward(self, x):
        return self.fc(x).sum(0)


@pytest.mark.parametrize("model, inputs, at, because", [
    (Shared(), (X,), "sum_1", "`lin` has no other use"),
    (InputWeight(), (X, torch.randn(8, 4)), "sum_1",
     "`lin`'s weight and bias are parameters or buffers, or computed from them alone"),
    (ReluBetween(), (X,), "sum_1", "the pattern does not match"),
    (BatchSum(), (X,), "sum_1", "only the last (feature) axis is reduced"),
], ids=["shared-output", "input-weight", "relu-between", "batch-axis"])
def test_a_row_reduction_is_not_folded_when_the_identity_does_not_apply(model, inputs, at, because):
    assert_does_not_fire(model, *inputs, rule=reduce_the_weight_not_the_output, at=at, because=because)


@functools.cache
def _rewritten(name: str):
    model = {"sum": RowReduction("sum", False), "mean": RowReduction("mean", True),
             "matmul": MatmulDivideSum(), "chain": Chain(), "matmuls": Matmuls()}[name]
    return model, rewritten(model, X)[0]


@settings(max_examples=12, deadline=None)
@given(name=st.sampled_from(["sum", "mean", "matmul", "chain", "matmuls"]), **RANDOM)
def test_rewritten_linear_maps_equal_the_model_in_float64_on_random_data(name, seed, batch, scale):
    model, c = _rewritten(name)
    assert_float64_equal(model, c, [X], seed, batch, scale)


class Chain(nn.Module):
    def __init__(self, hidden=32, out=4, expected=False):
        super().__init__()
        self.a, self.b = nn.Linear(8, hidden), nn.Linear(hidden, out)
        self.expected = expected

    def forward(self, x):
        if self.expected:
            w = torch.mm(self.b.weight, self.a.weight)
            return F.linear(x, w, F.linear(self.a.bias, self.b.weight, self.b.bias)) * 0.125
        return self.b(self.a(x)) * 0.125


def test_two_linear_layers_with_nothing_between_compose_and_a_trailing_scale_stays():
    assert_rewrites_to(Chain(), Chain(expected=True), X, rules=["compose_linear_maps"])


class Matmuls(nn.Module):
    def __init__(self, expected=False):
        super().__init__()
        self.p, self.q = nn.Parameter(torch.randn(8, 32)), nn.Parameter(torch.randn(32, 3))
        self.expected = expected

    def forward(self, x):
        if self.expected:
            return F.linear(x, torch.mm(self.q.permute(1, 0), self.p.permute(1, 0)))
        return x @ self.p @ self.q


def test_two_products_with_parameter_matrices_compose_into_one_linear_map():
    assert_rewrites_to(Matmuls(), Matmuls(expected=True), X, rules=["compose_linear_maps"])


class ReluChain(Chain):
    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class SharedChain(Chain):
    def forward(self, x):
        h = self.a(x)
        return self.b(h), h


class InputChain(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Parameter(torch.randn(32, 3))

    def forward(self, x, w):
        return x @ w @ self.q


@pytest.mark.parametrize("model, inputs, at, because", [
    (ReluChain(), (X,), "linear_1", "the pattern does not match"),
    (SharedChain(), (X,), "linear_1", "`inner` has no other use"),
    (InputChain(), (X, torch.randn(8, 32)), "matmul_1",
     "`inner`'s weight and bias are parameters or buffers, or computed from them alone"),
    (Chain(hidden=32, out=16), (torch.randn(4, 8),), "linear_1",
     "composing is cheaper at the traced sizes, counting W2·W1 in every forward"),
], ids=["relu-between", "shared-hidden", "input-weight", "not-cheaper"])
def test_linear_layers_do_not_compose_when_the_identity_does_not_apply_or_costs_more(model, inputs, at, because):
    assert_does_not_fire(model, *inputs, rule=compose_linear_maps, at=at, because=because, unchanged=False)
