"""Outputs ~0 by cancellation: the scale of the values they were computed from (scales.py) and the floor
of the correctness rule that uses it (numerics.py), on tensors and end to end through the evaluator."""

import json
import textwrap

import pytest
import torch
import torch.nn.functional as F

from fuseforge.evaluate.cli import main
from fuseforge.evaluate.numerics import FLOOR_ABS, FLOOR_REL, compare, floor_for, rms
from fuseforge.evaluate.scales import ScaleTracker


def _tracked(fn, *args):
    tracker = ScaleTracker()
    with torch.no_grad(), tracker:
        out = fn(*args)
    return out, tracker.scale_of(out)


def _x(*shape, seed=0, offset=0.0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g, dtype=torch.float64) * 4 + offset


def test_the_mean_of_a_normalised_tensor_gets_the_scale_of_the_normalised_values():
    x = _x(16, 64, offset=3.0)
    out, scale = _tracked(lambda t: F.layer_norm(t, (64,)).mean(-1), x)
    assert rms(out) < 1e-14  # ~0 by cancellation
    assert scale == pytest.approx(rms(F.layer_norm(x, (64,))), rel=1e-9)


def test_a_mean_subtracted_and_summed_gets_the_scale_of_the_values_it_came_from():
    x = _x(8, 256, offset=5.0)
    out, scale = _tracked(lambda t: (t - t.mean(-1, keepdim=True)).sum(-1), x)
    assert rms(out) < 1e-10
    assert scale == pytest.approx(rms(x), rel=1e-9)


def test_a_difference_of_equal_terms_carries_the_terms_scale_times_their_factor():
    y = _x(32, 32)
    out, scale = _tracked(lambda t: t * 2 - t - t, y)
    assert rms(out) == 0.0
    assert scale == pytest.approx(2 * rms(y), rel=1e-9)


def test_scalar_terms_subtracted_carry_their_scale():
    x = _x(100, offset=1.0)
    out, scale = _tracked(lambda t: t.sum() - t.flip(0).sum(), x)
    assert abs(out.item()) < 1e-12 and scale == pytest.approx(x.sum().item(), rel=1e-9)


def test_a_tanh_of_a_cancelled_value_keeps_its_operands_scale():
    x = _x(8, 64, offset=2.0)
    out, scale = _tracked(lambda t: torch.tanh(F.layer_norm(t, (64,)).mean(-1)) * 0.5, x)
    assert scale == pytest.approx(0.5 * rms(F.layer_norm(x, (64,))), rel=1e-9)


@pytest.mark.parametrize("name,fn", [
    ("linear", lambda x, w: F.linear(x, w)),
    ("conv", lambda x, w: F.conv1d(x.unsqueeze(1), w[:4, :3].unsqueeze(1))),
    ("exp of a difference", lambda x, w: torch.exp(x - x)),
    ("softmax", lambda x, w: torch.softmax(x * 50, -1)),
    ("layer norm", lambda x, w: F.layer_norm(x, (x.shape[-1],))),
    ("division by a tensor", lambda x, w: (x - x.mean()) / (x + 1)),
])
def test_contractions_norms_and_expanding_ops_keep_their_own_rms_as_the_scale(name, fn):
    x, w = _x(8, 16, offset=-2.0), _x(16, 16, seed=1, offset=-2.0)
    out, scale = _tracked(fn, x, w)
    assert scale == pytest.approx(rms(out), rel=1e-12), name


def test_an_overflow_upstream_leaves_the_scale_unknown_so_the_floor_falls_back():
    x = _x(4, 4) * 1e300
    out, scale = _tracked(lambda t: torch.clamp(t * t, max=1.0) - 1.0, x)
    assert scale is None
    assert floor_for(rms(out), scale) == FLOOR_REL * rms(out) + FLOOR_ABS


def test_tracking_does_not_change_the_reference_results():
    x = _x(8, 32, offset=1.0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.LayerNorm(32), torch.nn.GELU()).double()
    with torch.no_grad():
        plain = model(x)
        with ScaleTracker():
            tracked = model(x)
    assert torch.equal(plain, tracked)


# A difference of equal terms, on hand-made tensors: eager's rounding cancels exactly (y * 2 - y - y is
# exact in IEEE fp32), a correct kernel that computes 2 as 0.1 * 20 does not.
def _equal_terms(seed=0):
    y64 = _x(64, 64, seed=seed)
    y = y64.float()
    truth = y64 * 2 - y64 - y64
    eager = y * 2 - y - y
    scale = _tracked(lambda t: t * 2 - t - t, y64)[1]
    return y, truth, eager, scale


def test_eager_rounding_exactly_to_zero_would_fail_a_correct_reordering_without_the_operands_scale():
    y, truth, eager, scale = _equal_terms()
    reordered = (y * 0.1) * 20 - y - y
    assert rms(eager.double() - truth) == 0.0 and rms(reordered.double()) > 0
    assert not compare("out", reordered, eager, truth).passed  # floor 1e-7 * RMS(truth) + 1e-12 = 1e-12
    check = compare("out", reordered, eager, truth, scale=scale)
    assert check.passed, check.reason
    assert check.operand_scale == scale and check.floor == pytest.approx(FLOOR_REL * scale + FLOOR_ABS)


@pytest.mark.parametrize("bug", ["one term dropped", "1% of the operands' scale"])
def test_a_real_bug_in_a_near_zero_output_still_fails_with_the_operands_scale(bug):
    y, truth, eager, scale = _equal_terms()
    cand = y * 2 - y if bug == "one term dropped" else y * 2 - y - y + 0.01 * y
    check = compare("out", cand, eager, truth, scale=scale)
    assert not check.passed and check.cand_err > 1e4 * check.floor


# End to end through the evaluator on the CPU: the tracker runs during the float64 reference run.
HEADER = "import torch\nimport torch.nn as nn\n\n"

EQUAL_TERMS_MODEL = """
class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        y = self.linear(x)
        return y * 2 - y - y  # ~0 by cancellation (exactly 0 in eager)


def get_inputs():
    return [torch.rand(16, 32)]


def get_init_inputs():
    return [32]
"""

EQUAL_TERMS_CANDIDATE = """
class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        y = x @ self.linear.weight.t() + self.linear.bias
        return {expression}
"""

NORMALISED_MEAN_MODEL = """
class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.norm = nn.LayerNorm(features)

    def forward(self, x):
        return self.norm(x * 3 + 2).mean(-1)  # the mean of a normalised tensor: ~0


def get_inputs():
    return [torch.rand(8, 128)]


def get_init_inputs():
    return [128]
"""

NORMALISED_MEAN_CANDIDATE = """
class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.norm = nn.LayerNorm(features)

    def forward(self, x):
        x = x * 3 + 2
        mean = x.flip(-1).sum(-1, keepdim=True) / x.shape[-1]  # another order of summation
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        y = (x - mean) * torch.rsqrt(var + self.norm.eps) * self.norm.weight + self.norm.bias
        return {expression}
"""


def _verify(tmp_path, model: str, candidate: str, *extra: str) -> dict:
    model_path, cand_path = tmp_path / "model.py", tmp_path / "candidate.py"
    model_path.write_text(HEADER + textwrap.dedent(model))
    cand_path.write_text(HEADER + textwrap.dedent(candidate))
    out = tmp_path / "out"
    main([str(model_path), str(cand_path), "--out", str(out), "--skip-bench", "--seeds", "2", *extra])
    return json.loads((out / "50_verify.json").read_text())


def _device_flags(device: str) -> tuple[str, ...]:
    return ("--device", device)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_evaluator_passes_a_correct_reordering_of_an_output_that_is_zero_by_cancellation(tmp_path, device):
    record = _verify(tmp_path, EQUAL_TERMS_MODEL,
                     EQUAL_TERMS_CANDIDATE.format(expression="(y * 0.1) * 20 - y - y"), *_device_flags(device))
    assert record["verdict"] == "correct", record["reason"]
    check = record["cases"][0]["outputs"][0]
    assert check["truth_rms"] == 0.0 and check["operand_scale"] > 0.1
    assert check["cand_err"] > FLOOR_ABS  # what failed before: a floor of 1e-12 against eager's exact 0


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("expression", ["y * 2 - y", "y * 2 - y - y + 0.01 * y"])
def test_the_evaluator_fails_a_real_bug_in_an_output_that_is_zero_by_cancellation(tmp_path, device, expression):
    record = _verify(tmp_path, EQUAL_TERMS_MODEL, EQUAL_TERMS_CANDIDATE.format(expression=expression),
                     *_device_flags(device))
    assert record["verdict"] == "incorrect"
    assert "error vs fp64" in record["reason"]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_mean_of_a_normalised_tensor_computed_in_another_order_is_correct(tmp_path, device):
    record = _verify(tmp_path, NORMALISED_MEAN_MODEL, NORMALISED_MEAN_CANDIDATE.format(expression="y.mean(-1)"),
                     *_device_flags(device))
    assert record["verdict"] == "correct", record["reason"]
    for case in record["cases"]:
        check = case["outputs"][0]
        assert check["operand_scale"] > 1e6 * check["truth_rms"]  # judged against the normalised values


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("expression", ["(y + 0.01 * y.std()).mean(-1)", "(y * 1.01 + 0.01).mean(-1)"])
def test_the_mean_of_a_normalised_tensor_off_by_one_percent_of_its_operands_fails(tmp_path, device, expression):
    record = _verify(tmp_path, NORMALISED_MEAN_MODEL, NORMALISED_MEAN_CANDIDATE.format(expression=expression),
                     *_device_flags(device))
    assert record["verdict"] == "incorrect", record["reason"]


def test_a_batch_norms_running_mean_of_cancelling_values_carries_its_inputs_scale():
    x = _x(64, 3, offset=2.0) * 6
    bn = torch.nn.BatchNorm1d(3).double()
    tracker = ScaleTracker()
    with torch.no_grad(), tracker:
        centred = x - x.mean(0, keepdim=True)  # each channel's batch mean: ~0 by cancellation
        bn(centred)
    assert rms(bn.running_mean) < 1e-14
    assert tracker.scale_of(centred) == pytest.approx(rms(x), rel=1e-9)  # x - its mean carries x's scale
    assert tracker.scale_of(bn.running_mean) == pytest.approx(bn.momentum * rms(x), rel=1e-9)
    assert tracker.scale_of(bn.running_var) == pytest.approx(rms(bn.running_var), rel=1e-9)  # its own RMS


def test_an_eval_mode_batch_norm_leaves_its_running_mean_at_its_own_rms():
    bn = torch.nn.BatchNorm1d(3).double().eval()
    bn.running_mean.fill_(1e-9)
    tracker = ScaleTracker()
    with torch.no_grad(), tracker:
        bn(_x(64, 3) * 6)
    assert tracker.scale_of(bn.running_mean) == pytest.approx(1e-9, rel=1e-9)


CENTRED_BATCH_NORM_MODEL = """
class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.bn = nn.BatchNorm1d(features)

    def forward(self, x):
        y = self.linear(x) * 8
        y = y - y.mean(0, keepdim=True)  # each feature's batch mean: ~0 by cancellation
        return self.bn(y)


def get_inputs():
    return [torch.rand(48, 16)]


def get_init_inputs():
    return [16]
"""

CENTRED_BATCH_NORM_CANDIDATE = """
class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.bn = nn.BatchNorm1d(features)

    def forward(self, x):
        y = (x @ self.linear.weight.t() + self.linear.bias) * 8
        n = y.shape[0]
        y = y - y.flip(0).sum(0, keepdim=True) / n  # another order of summation
        mean = y.flip(0).sum(0) / n
        var = ((y - mean) ** 2).mean(0)
        m = self.bn.momentum
        with torch.no_grad():
            self.bn.running_mean.mul_(1 - m).add_({running_mean})
            self.bn.running_var.mul_(1 - m).add_(m * var * n / (n - 1))
            self.bn.num_batches_tracked.add_(1)
        return (y - mean) * torch.rsqrt(var + self.bn.eps) * self.bn.weight + self.bn.bias
"""


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_running_mean_that_is_zero_by_cancellation_computed_in_another_order_is_correct(tmp_path, device):
    record = _verify(tmp_path, CENTRED_BATCH_NORM_MODEL, CENTRED_BATCH_NORM_CANDIDATE.format(running_mean="m * mean"),
                     *_device_flags(device))
    assert record["verdict"] == "correct", record["reason"]
    for case in record["cases"]:
        check = next(b for b in case["buffers"] if b["name"] == "buffer bn.running_mean")
        assert check["operand_scale"] > 1e3 * check["truth_rms"]  # judged against the centred values


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_running_mean_off_by_one_percent_of_its_inputs_fails(tmp_path, device):
    record = _verify(tmp_path, CENTRED_BATCH_NORM_MODEL,
                     CENTRED_BATCH_NORM_CANDIDATE.format(running_mean="m * (mean + 0.01 * y.abs().mean())"),
                     *_device_flags(device))
    assert record["verdict"] == "incorrect"
    assert "bn.running_mean" in record["reason"]
