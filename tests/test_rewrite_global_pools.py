"""Rewrite family `global pools`: an adaptive pool to size 1 is a mean or an amax over the spatial axes."""

import pytest
import torch
import torch.nn.functional as F
from test_rewrite_support import assert_does_not_fire, assert_float64_equal, assert_rewrites_to, rewritten
from torch import nn

from fuseforge.families import named
from fuseforge.rewrite.global_pools import global_average_pool_is_a_mean, global_max_pool_is_an_amax


class GlobalPool(nn.Module):
    """tanh, then an adaptive pool of `dims` spatial axes to size 1, then a scale (or the expected reduction)."""

    def __init__(self, dims: int, op: str = "avg", expected: bool = False):
        super().__init__()
        self.dims, self.op, self.expected = dims, op, expected

    def forward(self, x):
        y = torch.tanh(x)
        axes = list(range(x.dim() - self.dims, x.dim()))
        if self.expected:
            pooled = y.mean(axes, keepdim=True) if self.op == "avg" else y.amax(axes, keepdim=True)
        else:
            pool = getattr(F, f"adaptive_{self.op}_pool{self.dims}d")
            pooled = pool(y, 1)
        return pooled * 2.0


INPUTS = {1: torch.randn(3, 4, 9), 2: torch.randn(3, 4, 6, 7), 3: torch.randn(2, 3, 4, 5, 6)}


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("op, rule", [("avg", "global_average_pool_is_a_mean"), ("max", "global_max_pool_is_an_amax")])
def test_an_adaptive_pool_to_size_one_becomes_the_reduction_over_its_spatial_axes(dims, op, rule):
    assert_rewrites_to(GlobalPool(dims, op), GlobalPool(dims, op, expected=True), INPUTS[dims], rules=[rule])


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("op", ["avg", "max"])
def test_the_rewritten_global_pool_equals_the_module_in_float64(dims, op):
    model = GlobalPool(dims, op)
    c, log = rewritten(model, INPUTS[dims])
    assert len(log.firings) == 1
    assert_float64_equal(model, c, [INPUTS[dims]], seed=dims, batch=5, scale=3.0)


def test_a_one_dimensional_global_average_pool_joins_a_row_kernel_with_its_neighbours():
    from fuseforge.partition import partition

    c, _ = rewritten(GlobalPool(1, "avg"), INPUTS[1])
    plan = partition(c.graph, named("rows"))
    kinds = [g.kind for g in plan.groups]
    assert kinds == ["rows"], kinds  # tanh -> mean over the last axis -> scale: one kernel


class PoolTo2(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(torch.tanh(x), (1, 2))


class MaxWithIndices(nn.Module):
    def forward(self, x):
        values, indices = F.adaptive_max_pool2d(torch.tanh(x), 1, return_indices=True)
        return values * 2.0, indices


def test_a_pool_to_more_than_one_value_per_axis_stays():
    assert_does_not_fire(PoolTo2(), INPUTS[2], rule=global_average_pool_is_a_mean, at="adaptive_avg_pool2d",
                         because="the pool's output size is 1 along every pooled axis")


def test_a_global_max_pool_whose_indices_are_used_stays():
    assert_does_not_fire(MaxWithIndices(), INPUTS[2], rule=global_max_pool_is_an_amax, at="getitem",
                         because="the pool's indices are unused (its one use is the tuple access of its values)")
