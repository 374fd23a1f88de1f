"""Emit: the functional graph written back as an efficient forward."""

import torch
from test_partition import _captured
from torch import nn

from fuseforge.emit import in_place_batch_norms


class LinearBatchNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.bn = nn.BatchNorm1d(8)

    def forward(self, x):
        return self.bn(self.fc(x) * 2.0)


class BatchNormReadingItsStatistics(LinearBatchNorm):
    def forward(self, x):
        return self.bn(self.fc(x)) + self.bn.running_mean


def test_a_train_mode_batchnorm_that_only_updates_its_buffers_is_emitted_in_place():
    c = _captured(LinearBatchNorm(), torch.randn(4, 8))
    assert list(in_place_batch_norms(c).values()) == [{"bn.running_mean", "bn.running_var"}]


def test_a_batchnorm_whose_old_statistics_are_read_elsewhere_keeps_the_functional_form():
    c = _captured(BatchNormReadingItsStatistics(), torch.randn(4, 8))
    assert in_place_batch_norms(c) == {}
