"""Rewrite family `linear maps`, convolutions: a global average pool of a convolution is a small linear map."""

import contextlib
import functools
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from test_rewrite_support import (
    assert_does_not_fire,
    assert_float64_equal,
    assert_rewrites_to,
    fired,
    rewritten,
)
from torch import nn

from fuseforge.rewrite import conv_pool
from fuseforge.rewrite.conv_pool import global_average_pool_of_conv, spatial_mean_of_conv_transpose

X = torch.randn(3, 4, 6, 7)  # non-square, so rows and columns need their own window matrices


@contextlib.contextmanager
def identity_only():
    """The identity alone: the cost guard without the host time of the ops the rule adds, which at these
    sizes (a few hundred values) outweighs any convolution. The policy has its own test below."""
    with mock.patch.object(conv_pool, "HOST_OP_S", 0.0):
        yield


class PooledConv(nn.Module):
    def __init__(self, k=3, padding=1, how="pool", stride=1, groups=1, expected=False):
        super().__init__()
        self.conv = nn.Conv2d(4, 6, k, padding=padding, stride=stride, groups=groups)
        self.how, self.expected = how, expected

    def forward(self, x):
        if self.expected:
            return self.window_sums_times_weight(x)
        y = self.conv(x)
        if self.how == "pool":
            return F.adaptive_avg_pool2d(y, 1)
        return y.mean((2, 3)) if self.how == "mean" else y.mean((-1, -2), keepdim=True)

    def window_sums_times_weight(self, x):  # the Expected side for k=3, padding=1, a 6×7 input
        rows = torch.triu(torch.tril(x.new_ones([3, 6]), 6 - 1 - 1), -1)
        cols = torch.triu(torch.tril(x.new_ones([3, 7]), 7 - 1 - 1), -1)
        column_sums = x.view(-1, 7).mm(cols.permute(1, 0))  # [N·C·6, 3]
        by_tap = column_sums.view(-1, 4, 6, 3).permute(0, 1, 3, 2).contiguous()  # [N, C, 3 (kw), 6]
        sums = by_tap.view(-1, 6).mm(rows.permute(1, 0))  # [N·C·3 (kw), 3 (kh)]
        weight = self.conv.weight.permute(0, 1, 3, 2).contiguous().view(6, 36) / (6 * 7)
        y = F.linear(sums.view(-1, 36), weight, self.conv.bias)
        return y.unsqueeze(-1).unsqueeze(-1)


def test_a_global_average_pool_of_a_padded_convolution_becomes_window_sums_and_a_small_product():
    with identity_only():
        assert_rewrites_to(PooledConv(), PooledConv(expected=True), X, rules=["global_average_pool_of_conv"])


def test_a_spatial_mean_of_a_convolution_is_the_same_identity():
    with identity_only():
        c, log = rewritten(PooledConv(how="mean"), X)
    assert [f.rule for f in log.firings] == ["spatial_mean_of_conv"]
    assert not any("conv" in str(n.target) for n in c.graph.nodes if n.op == "call_function")
    assert log.firings[0].flops_removed > 0


class SharedConv(PooledConv):
    def forward(self, x):
        y = self.conv(x)
        return F.adaptive_avg_pool2d(y, 1), y


@pytest.mark.parametrize("model, at, because", [
    (PooledConv(stride=2), "adaptive_avg_pool2d",
     "the convolution is 2-D on a batch, with stride 1, dilation 1 and one group"),
    (PooledConv(groups=2), "adaptive_avg_pool2d",
     "the convolution is 2-D on a batch, with stride 1, dilation 1 and one group"),
    (SharedConv(), "adaptive_avg_pool2d", "`conv` has no other use"),
], ids=["stride-2", "groups-2", "shared-conv-output"])
def test_a_pooled_convolution_stays_when_the_identity_is_not_built_for_it(model, at, because):
    with identity_only():
        assert_does_not_fire(model, X, rule=global_average_pool_of_conv, at=at, because=because,
                             others=MEAN_AND_BIAS)


def test_a_small_pooled_convolution_stays_because_the_ops_the_identity_adds_cost_more_host_time():
    assert_does_not_fire(PooledConv(), X, rule=global_average_pool_of_conv, at="adaptive_avg_pool2d",
                         because="the window sums, the small product and the host time of their ops cost less than "
                                 "the convolution and its pool", others=MEAN_AND_BIAS)


@pytest.mark.parametrize("size, channels, fires", [(128, 128, True), (64, 64, False)])
def test_the_identity_pays_where_the_convolution_outweighs_the_host_time_of_the_ops_it_adds(size, channels, fires):
    # 128 x 8 x 128 x 128 -> 128 channels (conv2d_avgpool_linear: 6.8x faster than eager with the identity on an
    # H100); 128 x 8 x 64 x 64 -> 64 channels: the identity's ops took 445 us to enqueue vs the convolution's 183 us
    class Big(PooledConv):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, channels, 3)

    _, log = rewritten(Big(), torch.empty(128, 8, size, size))  # traced, not run
    assert ("global_average_pool_of_conv" in fired(log)) is fires


# the convolution's bias is split off where the pool stays; a global pool that stays becomes a mean
# (rewrite/global_pools.py), which spatial_mean_of_conv then declines for the same reason, and the bias
# moves past that mean (rewrite/channel_shifts.py)
BIAS = frozenset({"conv_bias_as_channel_add"})
MEAN_AND_BIAS = BIAS | {"global_average_pool_is_a_mean", "mean_of_channel_shift"}


class PoolTo2(PooledConv):
    def forward(self, x):
        return F.adaptive_avg_pool2d(self.conv(x), 2)


def test_a_pool_to_more_than_one_pixel_is_not_a_global_average():
    assert_does_not_fire(PoolTo2(), X, rule=global_average_pool_of_conv, at="adaptive_avg_pool2d",
                         because="the pool's output is 1×1", others=BIAS)


CONFIGS = [(3, 1, "pool"), ((3, 5), (0, 2), "pool"), (1, 0, "mean"), (3, 2, "keepdim"), (5, 1, "pool")]


@functools.cache
def _rewritten(i: int):
    k, padding, how = CONFIGS[i]
    model = PooledConv(k, padding, how)
    with identity_only():
        c, log = rewritten(model, X)
    assert log.firings, "the rule should have fired"
    return model, c


@settings(max_examples=15, deadline=None)
@given(i=st.integers(0, len(CONFIGS) - 1), seed=st.integers(0, 2**31 - 1), batch=st.integers(1, 4),
       scale=st.sampled_from([1e-3, 1.0, 1e3]))
def test_window_sums_give_the_pooled_convolution_exactly_in_float64_at_every_border(i, seed, batch, scale):
    model, c = _rewritten(i)
    assert_float64_equal(model, c, [X], seed, batch, scale)


# ---------------------------------------------------------------------------------------- transposed

class MeanOfConvTranspose(nn.Module):
    def __init__(self, k=3, stride=1, padding=0, output_padding=0, keepdim=True, groups=1, dilation=1):
        super().__init__()
        self.conv = nn.ConvTranspose2d(4, 6, k, stride=stride, padding=padding, output_padding=output_padding,
                                       groups=groups, dilation=dilation)
        self.keepdim = keepdim

    def forward(self, x):
        return self.conv(x).mean((2, 3), keepdim=self.keepdim)


# (window, stride, padding, output padding, keepdim): borders cropped by the padding on both sides, strides
# that leave gaps between taps, an output padding past the last tap, non-square windows
TRANSPOSED = [(3, 1, 0, 0, True), (3, 2, 1, 1, True), (4, 2, 1, 0, False), ((3, 5), (2, 1), (2, 1), (1, 0), True),
              (5, 3, 4, 2, False), (1, 1, 0, 0, True)]


@functools.cache
def _rewritten_transposed(i: int):
    k, stride, padding, output_padding, keepdim = TRANSPOSED[i]
    model = MeanOfConvTranspose(k, stride, padding, output_padding, keepdim)
    with identity_only():
        c, log = rewritten(model, X)
    assert fired(log) == ["spatial_mean_of_conv_transpose"], fired(log)
    assert not any("conv" in str(n.target) for n in c.graph.nodes if n.op == "call_function")
    return model, c


@settings(max_examples=20, deadline=None)
@given(i=st.integers(0, len(TRANSPOSED) - 1), seed=st.integers(0, 2**31 - 1), batch=st.integers(1, 4),
       scale=st.sampled_from([1e-3, 1.0, 1e3]))
def test_landing_sums_give_the_spatial_mean_of_a_transposed_convolution_exactly_in_float64(i, seed, batch, scale):
    model, c = _rewritten_transposed(i)
    assert_float64_equal(model, c, [X], seed, batch, scale)


@pytest.mark.parametrize("kwargs", [{"groups": 2}, {"dilation": 2}], ids=["groups-2", "dilation-2"])
def test_a_grouped_or_dilated_transposed_convolution_keeps_its_mean(kwargs):
    with identity_only():
        assert_does_not_fire(MeanOfConvTranspose(**kwargs), X, rule=spatial_mean_of_conv_transpose, at="mean",
                             because="the transposed convolution is 2-D on a batch, with dilation 1 and one group",
                             others=MEAN_AND_BIAS)


def test_a_small_transposed_convolution_keeps_its_mean_because_the_ops_the_identity_adds_cost_more_host_time():
    assert_does_not_fire(MeanOfConvTranspose(), X, rule=spatial_mean_of_conv_transpose, at="mean",
                         because="the window sums, the small product and the host time of their ops cost less than "
                                 "the convolution and its pool", others=MEAN_AND_BIAS)


def test_the_transposed_identity_pays_at_a_problem_models_size():
    x = torch.empty(16, 64, 128, 128, device="meta")
    model = MeanOfConvTranspose(stride=2, padding=1, output_padding=1)
    model.conv = nn.ConvTranspose2d(64, 128, 3, stride=2, padding=1, output_padding=1).to("meta")
    c, log = rewritten(model.to("meta"), x)
    assert fired(log) == ["spatial_mean_of_conv_transpose"]
