"""`fuseforge check` on a model with random ops (train-mode dropout): the reference's truth and eager calls and
every candidate call start from one generator state, and the float64 truth draws what float32 draws, so an
honest candidate that calls the same random ops is correct and one that leaves them out is not."""

import textwrap

import pytest

from fuseforge.check.orchestrate import CheckSettings, check_files, clear_reference_cache

MODEL = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, p):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.dropout = nn.Dropout(p)

    def forward(self, x):
        return torch.sigmoid(self.dropout(self.linear(x)))


def get_inputs():
    return [torch.randn(32, 48)]


def get_init_inputs():
    return [48, 40, 0.3]
'''
CANDIDATE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, p):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.p = p

    def forward(self, x):
        y = x @ self.linear.weight.t() + self.linear.bias
        {dropout}
        return 1.0 / (1.0 + torch.exp(-y))
'''
SETTINGS = CheckSettings(device="cpu", seeds=1, trials=3, warmup=1, build_timeout_s=120, run_timeout_s=120)
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]  # on CUDA float64 and float32 draw other masks


@pytest.fixture(scope="module")
def cache():
    shared: dict = {}
    yield shared
    clear_reference_cache(shared)


def _check(tmp_path, cache, dropout: str, device: str) -> dict:
    model, candidate = tmp_path / "linear_dropout.py", tmp_path / "candidate.py"
    model.write_text(MODEL)
    candidate.write_text(textwrap.dedent(CANDIDATE).replace("{dropout}", dropout))
    return check_files(model, candidate, CheckSettings(**{**SETTINGS.__dict__, "device": device}), cache)


@pytest.mark.parametrize("device", DEVICES)
def test_an_honest_candidate_with_the_models_dropout_is_correct(tmp_path, cache, device):
    """Catches a grader that compares draws from different generator states (cheat:uninitialised_memory
    for two calls on the same inputs that differ, as seen on the H100 for a model with random noise)."""
    record = _check(tmp_path, cache, "y = F.dropout(y, self.p, self.training)", device)
    assert record["verdict"] == "correct", (record["reason"], [f for f in record["findings"] if f["decisive"]])


@pytest.mark.parametrize("device", DEVICES)
def test_a_candidate_that_leaves_out_the_dropout_is_incorrect(tmp_path, cache, device):
    """Catches a truth that draws its own mask: eager's error would then be the whole random term, and a bound
    of twice that could not fail."""
    record = _check(tmp_path, cache, "pass", device)
    assert record["verdict"] == "incorrect", record["reason"]
