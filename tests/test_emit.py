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


TINY_BN = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)
        self.bn = nn.BatchNorm1d(n)

    def forward(self, x):
        return torch.relu(self.bn(self.fc(x) * 0.5))

def get_inputs():
    return [torch.randn(16, 8)]

def get_init_inputs():
    return [8]
'''


def _cpu_run(tmp_path):
    from fuseforge.config import OptimizeConfig
    from fuseforge.pipeline import optimize

    model = tmp_path / "tiny_bn.py"
    model.write_text(TINY_BN)
    return optimize(OptimizeConfig(model_path=model, out_dir=tmp_path / "out", gpu=False))


def test_the_emitted_forward_matches_the_model_on_the_cpu_with_reference_kernels(tmp_path):
    run = _cpu_run(tmp_path)
    assert any(line.startswith("emitted buffer bn.running_var") for line in run.cpu_check.detail)
    assert run.cpu_check.passed


def test_an_emitted_forward_that_forgets_a_buffer_update_fails_the_cpu_check(tmp_path):
    from fuseforge.evaluate.cpu_check import check_emitted_on_cpu, float64_reference

    run = _cpu_run(tmp_path)
    path = run.config.out_dir / "40_model_new.py"
    text = path.read_text()
    assert "num_batches_tracked.copy_(" in text
    path.write_text("\n".join(line for line in text.splitlines() if "num_batches_tracked.copy_(" not in line))
    reference = float64_reference(run.loaded, run.captured)
    broken = check_emitted_on_cpu(run.loaded, run.captured, run.plan, path, reference)
    assert not broken.passed
    assert any("num_batches_tracked" in d and "0.0e+00" not in d for d in broken.detail)
