"""Batch, instance and group norms in the cost model: eager's train-mode batch norm (cuDNN's kernel, three passes over
its input, a block per channel), instance and group norms with their input's statistics (three passes, a block per
unit) and the channel-norm kernels (two passes, or one for units a warp holds)."""

import pytest
import torch
from test_partition import _captured
from torch import nn

from fuseforge.cost import eager_cost, estimate
from fuseforge.families.channel_norms import FAMILY, WARP_UNIT
from fuseforge.partition import partition
from fuseforge.rates import BANDWIDTH, LAUNCH_S, SMS


def _bn(channels: int, shape: tuple[int, ...]):
    model = nn.Sequential(nn.BatchNorm2d(channels)).train()
    captured = _captured(model, torch.randn(*shape))
    return captured, eager_cost(captured)


def test_eagers_train_mode_batch_norm_reads_its_input_twice_and_writes_once_at_the_channels_share_of_the_sms():
    """Catches the price of one read of the input (a tuple-valued op's outputs counted as nothing: 6x fast on a
    64-channel batch norm that cuDNN ran in 556 us on an H100) and one that ignores the idle SMs."""
    n, c, h, w = 8, 64, 64, 64
    nbytes = n * c * h * w * 4
    _, eager = _bn(c, (n, c, h, w))
    expected = 3 * nbytes / (BANDWIDTH * c / SMS) + 2 * LAUNCH_S  # and num_batches_tracked's add
    assert eager.seconds == pytest.approx(expected, rel=0.01)
    assert eager.bytes_moved >= 2 * nbytes  # the output of the tuple-valued op is written
    _, wide = _bn(SMS * 2, (n, SMS * 2, h, w // 4))  # enough channels for every SM: the bandwidth
    assert wide.seconds == pytest.approx(3 * n * SMS * 2 * h * (w // 4) * 4 / BANDWIDTH + 2 * LAUNCH_S, rel=0.01)


@pytest.mark.parametrize("norm, units", [(nn.InstanceNorm2d(16), 8 * 16), (nn.GroupNorm(4, 16), 8 * 4)])
def test_eagers_instance_and_group_norms_read_their_input_twice_and_write_once_at_the_units_share_of_the_sms(
        norm, units):
    """Catches eager's instance or group norm priced as one read and one write, where PyTorch reads the input for the
    statistics and again to normalise: a lone instance norm was predicted 0.67x, though the channel kernels move
    what eager moves."""
    shape = (8, 16, 64, 64)
    nbytes = torch.Size(shape).numel() * 4
    eager = eager_cost(_captured(nn.Sequential(norm).train(), torch.randn(*shape)))
    assert eager.seconds == pytest.approx(3 * nbytes / (BANDWIDTH * min(1.0, units / SMS)) + LAUNCH_S, rel=0.01)


def test_an_instance_norm_with_running_statistics_is_one_pass_at_the_bandwidth():
    norm = nn.InstanceNorm2d(16, track_running_stats=True).eval()
    nbytes = 8 * 16 * 64 * 64 * 4
    assert eager_cost(_captured(norm, torch.randn(8, 16, 64, 64))).seconds < 2.2 * nbytes / BANDWIDTH + 2 * LAUNCH_S


def test_an_eval_mode_batch_norm_is_one_pass_at_the_bandwidth():
    model = nn.Sequential(nn.BatchNorm2d(64)).eval()
    captured = _captured(model, torch.randn(8, 64, 64, 64))
    nbytes = 8 * 64 * 64 * 64 * 4
    assert eager_cost(captured).seconds < 2.2 * nbytes / BANDWIDTH + 10 * LAUNCH_S


class GroupNormTanh(nn.Module):
    def __init__(self, channels: int, groups: int):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels)

    def forward(self, x):
        return torch.tanh(self.norm(x))


@pytest.mark.parametrize("shape, groups, passes", [((16, 64, 32, 32), 8, 2),  # 8 x 1024 values a unit
                                                   ((512, 64, 4, 2), 16, 1)])  # 4 x 8 = 32 values: a warp's
def test_a_channel_norm_kernel_reads_its_input_once_per_pass(shape, groups, passes):
    """Catches the kernel priced as one pass over its input where it makes two (statistics, then normalise: the
    plan predicted 1.5x too fast on 73_Conv2d_BatchNorm_Scaling), and two where a warp keeps a unit in registers."""
    captured = _captured(GroupNormTanh(shape[1], groups), torch.randn(*shape))
    plan = partition(captured.graph, [FAMILY])
    (group,) = [g for g in plan.groups if g.family is not None and g.family.name == "channel_norms"]
    by_name = {n.name: n for n in captured.graph.nodes}
    nbytes = torch.Size(shape).numel() * 4
    seconds = group.family.seconds(group, by_name)
    assert seconds == pytest.approx((passes + 1) * nbytes / BANDWIDTH + passes * LAUNCH_S, rel=0.01)
    assert estimate(eager_cost(captured), captured, plan).plan_s >= seconds
    assert (shape[1] // groups * shape[2] * shape[3] <= WARP_UNIT) is (passes == 1) is group.spec.warp_units
    # the report says what runs
    assert ("one launch with an NCHW input" in FAMILY.replaced(group)[1]) is (passes == 1)
    assert (FAMILY.how_for([group])[1].startswith("Units of at most")) is (passes == 1)


def test_a_batch_norm_of_rows_takes_the_two_launch_column_kernels_whatever_its_batch():
    captured = _captured(nn.Sequential(nn.BatchNorm1d(64)).train(), torch.randn(32, 64))
    (group,) = [g for g in partition(captured.graph, [FAMILY]).groups if g.family is FAMILY]
    assert group.spec.values_per_unit == 32 and not group.spec.warp_units and group.spec.launches == 2
