"""The plan's host time: each call of the emitted forward takes HOST_OP_S to issue, a floor under the plan's time
(what the benchmark measures where the GPU work is short)."""

import torch
from test_partition import _captured
from torch import nn

from fuseforge.cost import eager_cost, estimate
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


def test_a_plan_of_small_calls_takes_their_host_time():
    c, plan = _estimate(torch.randn(4, 8))
    assert c.plan_calls == len(plan.steps) >= 3
    assert c.plan_s == c.plan_host_s == len(plan.steps) * HOST_OP_S


def test_a_plan_whose_gpu_work_is_longer_is_priced_by_that_work():
    c, plan = _estimate(torch.randn(4096, 65536))
    assert c.plan_s > c.plan_host_s == len(plan.steps) * HOST_OP_S
