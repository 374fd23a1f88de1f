"""Rewrite family `identities`: size-1 reductions, range-keeping activations, views that cancel, CSE."""

import functools

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from test_rewrite_support import assert_does_not_fire, assert_float64_equal, assert_rewrites_to, rewritten
from torch import nn

from fuseforge.rewrite.identities import (
    clamp_within_range,
    common_subexpression,
    detach_of_a_value,
    reduction_over_size_one_axes,
    views_that_cancel,
)

X = torch.randn(6, 1, 4)


class Expected(nn.Module):
    """A module whose forward is given: the Expected side of a Before/Expected pair."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def centred_over_size_one(x):
    return x - x.mean(1, keepdim=True), x.sum(1) * 2, x.amax(1, keepdim=True) + 1


@pytest.mark.parametrize("before, expected, rules", [
    (centred_over_size_one, lambda x: (x - x, torch.squeeze(x, (1,)) * 2, x + 1),
     ["reduction_over_size_one_axes"] * 3),
    (lambda x: torch.relu(torch.relu(x)) + 1, lambda x: torch.relu(x) + 1, ["clamp_within_range"]),
    (lambda x: torch.clamp(torch.tanh(x), -1.0, 1.5), lambda x: torch.tanh(x), ["clamp_within_range"]),
    (lambda x: F.hardtanh(torch.sigmoid(x), 0.0, 1.0) * 3, lambda x: torch.sigmoid(x) * 3, ["clamp_within_range"]),
    (lambda x: torch.tanh(torch.flatten(x.unsqueeze(-1), 2).squeeze(1).unsqueeze(1)), lambda x: torch.tanh(x),
     ["views_that_cancel"] * 2),
    (lambda x: torch.tanh(x) * torch.tanh(x), lambda x: torch.tanh(x) * torch.tanh(x).clone().detach(), None),
    (lambda x: x.clone().detach() * 2 + x, lambda x: x.clone() * 2 + x, ["detach_of_a_value"]),
], ids=["size-one-axes", "relu-relu", "clamp-tanh", "hardtanh-sigmoid", "views", "cse", "detach"])
def test_work_that_cannot_change_the_value_is_removed(before, expected, rules):
    if rules is None:  # CSE: written by hand, as export keeps both tanh calls of the Expected side too
        c, log = rewritten(Expected(before), X)
        assert [f.rule for f in log.firings] == ["common_subexpression"]
        tanh = [n for n in c.graph.nodes if "tanh" in str(n.target)]
        assert len(tanh) == 1 and list(tanh[0].users)[0].args == (tanh[0], tanh[0])
        return
    assert_rewrites_to(Expected(before), Expected(expected), X, rules=rules)


def _two_dropouts(x):
    return F.dropout(x, 0.5, training=True) + F.dropout(x, 0.5, training=True)


@pytest.mark.parametrize("fn, rule, at, because", [
    (lambda x: x.sum(2, keepdim=True), reduction_over_size_one_axes, "sum_1", "every reduced axis has size 1"),
    (lambda x: (x > 0).sum(1, keepdim=True), reduction_over_size_one_axes, "sum_1",
     "the result has the dtype of the reduced tensor"),
    (lambda x: torch.relu(torch.tanh(x)), clamp_within_range, "relu", "`x` already lies within the op's bounds"),
    (lambda x: torch.clamp(torch.sigmoid(x), 0.1, 1.0), clamp_within_range, "clamp",
     "`x` already lies within the op's bounds"),
    (lambda x: x.reshape(-1, 2, 2).sum(1), views_that_cancel, "view",
     "the chain of views ends in the shape it started from"),
    (lambda x: torch.tanh(x.transpose(1, 2).transpose(1, 2)), views_that_cancel, "transpose_1",
     "the pattern does not match"),
    (_two_dropouts, common_subexpression, "native_dropout_1", "the op is deterministic (not random)"),
    (lambda x: torch.tanh(x) + torch.tanh(x + 1), common_subexpression, "tanh_1",
     "an earlier op computes the same function of the same arguments"),
    (lambda x: (torch.tanh(x).detach(), x + 1), detach_of_a_value, "detach",
     "the detached value is no output of the forward"),
], ids=["size-four-axis", "bool-sum-to-int", "relu-of-tanh", "clamp-narrower", "reshape", "transposes",
        "random", "different-argument", "detached-output"])
def test_an_identity_does_not_fire_where_it_would_change_the_value(fn, rule, at, because):
    assert_does_not_fire(Expected(fn), X, rule=rule, at=at, because=because)


@functools.cache
def _rewritten(i: int):
    fns = [centred_over_size_one, lambda x: torch.relu(torch.relu(x)) + torch.clamp(torch.tanh(x), -1.0, 1.0),
           lambda x: torch.tanh(x) * torch.tanh(x) + torch.flatten(x.unsqueeze(-1), 2),
           lambda x: torch.sigmoid(x).clone().detach() * x + torch.sigmoid(x)]
    model = Expected(fns[i])
    return model, rewritten(model, X)[0]


@settings(max_examples=10, deadline=None)
@given(i=st.integers(0, 3), seed=st.integers(0, 2**31 - 1), batch=st.integers(1, 5),
       scale=st.sampled_from([1e-3, 1.0, 1e3]))
def test_removed_identities_give_the_model_s_values_in_float64_on_random_data(i, seed, batch, scale):
    model, c = _rewritten(i)
    assert_float64_equal(model, c, [X], seed, batch, scale)
