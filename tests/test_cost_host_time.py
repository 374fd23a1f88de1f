"""The plan's host time: each call of the emitted forward takes HOST_OP_S to issue, and the GPU runs each call's
work once it is issued (cost.issued_in_order): a floor under the plan's time, and more than the larger of the two
sums where short and long calls alternate."""

import torch
from test_partition import _captured
from torch import nn

from fuseforge.cost import eager_cost, estimate, issued_in_order
from fuseforge.partition import partition
from fuseforge.rates import HOST_OP_S


class Small(nn.Module):
    def forward(self, x):
        y = torch.tanh(x) + 1
        return y.sum(-1), torch.sigmoid(y).amax(-1)


def _estimate(x):
    captured = _captured(Small(), x)
    eager = eager_cost(captured)
    plan = partition(captured.graph)
    return estimate(eager, captured, plan), plan


def test_a_plan_of_small_calls_takes_their_host_time_and_its_last_call_s_work():
    c, plan = _estimate(torch.randn(4, 8))
    assert c.plan_calls == len(plan.steps) >= 3
    assert c.plan_host_s == len(plan.steps) * HOST_OP_S > c.plan_gpu_s > 0
    assert c.plan_host_s < c.plan_s < c.plan_host_s + c.plan_gpu_s


def test_a_plan_whose_gpu_work_is_longer_is_priced_by_that_work():
    c, plan = _estimate(torch.randn(4096, 65536))
    assert c.plan_s > c.plan_gpu_s > c.plan_host_s == len(plan.steps) * HOST_OP_S


def test_calls_issued_in_order_wait_for_their_launch_and_for_the_call_before():
    h = HOST_OP_S
    assert issued_in_order([0.0, 0.0, 0.0]) == 3 * h  # views: their host time alone
    assert issued_in_order([10 * h, 0.0, 0.0]) == 11 * h  # a long first kernel hides the launches after it
    # short and long calls alternating: 4h to issue, 4h of GPU work, but each long one starts only after its launch
    assert issued_in_order([0.0, 2 * h, 0.0, 2 * h]) == 6 * h
    assert issued_in_order([]) == 0.0
