"""Rewrite family `channel shifts`: a per-channel add moves past a mean along other axes."""

import pytest
import torch
from test_rewrite_support import (
    assert_does_not_fire,
    assert_float64_equal,
    assert_rewrites_to,
    fired,
    rewritten,
)
from torch import nn

from fuseforge.rewrite.channel_shifts import mean_of_channel_shift

X = torch.randn(2, 3, 4, 5, 6)


class ShiftedMean(nn.Module):
    """x + b, then a mean over `dims` (or the expected mean, then + b)."""

    def __init__(self, dims, keepdim, shape=(3, 1, 1, 1), expected=False):
        super().__init__()
        self.b = nn.Parameter(torch.randn(shape))
        self.dims, self.keepdim, self.expected = dims, keepdim, expected

    def forward(self, x):
        y = torch.tanh(x)
        if not self.expected:
            return (y + self.b).mean(self.dims, keepdim=self.keepdim)
        b = self.b
        if not self.keepdim:  # the reduced axes of b (right-aligned against y) go
            offset = y.dim() - b.dim()
            b = b.view([n for a, n in enumerate(b.shape) if a + offset not in [d % y.dim() for d in self.dims]])
        return y.mean(self.dims, keepdim=self.keepdim) + b


CASES = [((2,), True), ((2,), False), ((2, 3, 4), True), ((-1, -2), False)]


@pytest.mark.parametrize("dims, keepdim", CASES)
def test_a_per_channel_add_moves_after_a_mean_over_other_axes(dims, keepdim):
    assert_rewrites_to(ShiftedMean(dims, keepdim), ShiftedMean(dims, keepdim, expected=True), X,
                       rules=["mean_of_channel_shift"])


@pytest.mark.parametrize("dims, keepdim", CASES)
def test_the_moved_shift_equals_the_module_in_float64(dims, keepdim):
    model = ShiftedMean(dims, keepdim)
    c, log = rewritten(model, X)
    assert fired(log) == ["mean_of_channel_shift"]
    assert_float64_equal(model, c, [X], seed=len(dims), batch=3, scale=3.0)


def test_a_convolution_bias_before_a_mean_over_depth_lands_on_the_mean():
    class ConvMean(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.ConvTranspose3d(3, 4, 3, stride=2, padding=1)

        def forward(self, x):
            return torch.softmax(self.conv(x).mean(dim=2, keepdim=True), dim=1)

    model = ConvMean()
    c, log = rewritten(model, X)
    assert fired(log) == ["conv_bias_as_channel_add", "mean_of_channel_shift"]
    assert_float64_equal(model, c, [X], seed=7, batch=2, scale=1.0)


def test_a_shift_that_varies_along_the_mean_stays_before_it():
    assert_does_not_fire(ShiftedMean((2,), True, shape=(4, 1, 1)), X, rule=mean_of_channel_shift, at="mean",
                         because="the add has no scale (alpha 1); one operand has its full shape, the other is a "
                                 "number or constant along the mean's axes")


def test_a_shifted_value_read_elsewhere_stays():
    class Shared(ShiftedMean):
        def forward(self, x):
            y = x + self.b
            return y.mean(2), y

    assert_does_not_fire(Shared((2,), False), X, rule=mean_of_channel_shift, at="mean", because="`added` has no other use")
