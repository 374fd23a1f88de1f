"""Rewrite family `pool chains`: two pools in a row that tile their input are one pool of the product window."""

import pytest
import torch
import torch.nn.functional as F
from test_rewrite_support import assert_does_not_fire, assert_float64_equal, assert_rewrites_to, rewritten
from torch import nn

from fuseforge.rewrite.pool_chains import average_pool_of_an_average_pool, max_pool_of_a_max_pool


class TwoPools(nn.Module):
    """tanh, two pools of `dims` axes (windows k1 then k2, stride = window unless given), a scale; or the one pool
    of window k1 k2 they equal."""

    def __init__(self, dims: int, op: str, k1, k2, expected: bool = False, stride2=None, padding2=0):
        super().__init__()
        self.pool = getattr(F, f"{op}_pool{dims}d")
        self.k1, self.k2, self.expected, self.stride2, self.padding2 = k1, k2, expected, stride2, padding2

    def forward(self, x):
        y = torch.tanh(x)
        if self.expected:
            k = [a * b for a, b in zip(self.k1, self.k2)]
            return self.pool(y, k, k) * 2.0
        y = self.pool(y, self.k1)
        return self.pool(y, self.k2, self.stride2, self.padding2) * 2.0


CASES = {1: ([2], [3], torch.randn(3, 4, 20)), 2: ([2, 3], [3, 2], torch.randn(2, 3, 13, 14)),
         3: ([2, 2, 2], [3, 2, 2], torch.randn(2, 3, 13, 9, 10))}  # sizes not multiples of the windows: floors


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("op, rule", [("avg", "average_pool_of_an_average_pool"), ("max", "max_pool_of_a_max_pool")])
def test_two_pools_that_tile_their_input_become_one_pool_of_the_product_window(dims, op, rule):
    k1, k2, x = CASES[dims]
    assert_rewrites_to(TwoPools(dims, op, k1, k2), TwoPools(dims, op, k1, k2, expected=True), x, rules=[rule])


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("op", ["avg", "max"])
def test_the_merged_pool_equals_the_two_pools_in_float64(dims, op):
    k1, k2, x = CASES[dims]
    model = TwoPools(dims, op, k1, k2)
    c, log = rewritten(model, x)
    assert [f.rule for f in log.firings] == [f"{'average' if op == 'avg' else 'max'}_pool_of_a"
                                             f"{'n_average' if op == 'avg' else '_max'}_pool"]
    assert_float64_equal(model, c, [x], seed=dims, batch=3, scale=2.0)


def test_pools_whose_windows_overlap_or_pad_stay_two():
    k1, k2, x = CASES[2]
    overlapping = TwoPools(2, "max", k1, k2, stride2=[1, 1])
    assert_does_not_fire(overlapping, x, rule=max_pool_of_a_max_pool, at="max_pool2d_1",
                         because="both pools tile their input: stride equal to the window, no padding, dilation 1, "
                                 "floor mode, no divisor override; the same op on the same axes")
    padded = TwoPools(2, "avg", k1, k2, padding2=1)
    assert_does_not_fire(padded, x, rule=average_pool_of_an_average_pool, at="avg_pool2d_1",
                         because="both pools tile their input: stride equal to the window, no padding, dilation 1, "
                                 "floor mode, no divisor override; the same op on the same axes")


class PooledTwice(nn.Module):
    """The first pool's output is also returned: it is computed anyway, and the rule does not fire."""

    def forward(self, x):
        y = F.max_pool2d(torch.tanh(x), 2)
        return F.max_pool2d(y, 2), y


def test_a_first_pool_read_elsewhere_stays():
    assert_does_not_fire(PooledTwice(), torch.randn(2, 3, 8, 8), rule=max_pool_of_a_max_pool, at="max_pool2d_1",
                         because="`inner` has no other use")
