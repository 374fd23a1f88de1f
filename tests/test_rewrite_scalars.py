"""Rewrite family `scalar folding`: a scalar factor moves out of a sum or mean, onto the smaller result."""

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_rewrite_support import assert_does_not_fire, assert_float64_equal, assert_rewrites_to, rewritten
from torch import nn

from fuseforge.rewrite.scalars import scalar_out_of_reduction

X = torch.randn(6, 8, 5)


class Scaled(nn.Module):
    def __init__(self, expected=False):
        super().__init__()
        self.expected = expected

    def forward(self, x):
        if self.expected:
            return torch.sum(x, [-1], True) * 2.5, torch.mean(x, [1]) / 3
        return torch.sum(x * 2.5, [-1], True), torch.mean(x / 3, [1])


def test_a_scalar_factor_or_divisor_moves_out_of_a_sum_and_a_mean():
    assert_rewrites_to(Scaled(), Scaled(expected=True), X,
                       rules=["scalar_out_of_reduction", "scalar_out_of_reduction"])


class SharedProduct(nn.Module):
    def forward(self, x):
        y = x * 2.5
        return y.sum(-1), y


class TensorFactor(nn.Module):
    def __init__(self):
        super().__init__()
        self.gain = nn.Parameter(torch.randn(5))

    def forward(self, x):
        return (x * self.gain).sum(-1)


class IntegerSum(nn.Module):
    def forward(self, x):
        return (x.long() * 2).sum(-1)


@pytest.mark.parametrize("model, at, because", [
    (SharedProduct(), "sum_1", "`scaled` has no other use"),
    (TensorFactor(), "sum_1", "`c` is a Python number"),
    (IntegerSum(), "sum_1", "`y` is a floating-point tensor"),
], ids=["shared-product", "tensor-factor", "integer"])
def test_a_factor_stays_inside_the_reduction_when_moving_it_would_not_be_the_same(model, at, because):
    assert_does_not_fire(model, X, rule=scalar_out_of_reduction, at=at, because=because)


@functools.cache
def _rewritten():
    model = Scaled()
    return model, rewritten(model, X)[0]


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), batch=st.integers(1, 5), scale=st.sampled_from([1e-3, 1.0, 1e3]))
def test_moved_scalars_give_the_model_s_values_in_float64_on_random_data(seed, batch, scale):
    model, c = _rewritten()
    assert_float64_equal(model, c, [X], seed, batch, scale)
