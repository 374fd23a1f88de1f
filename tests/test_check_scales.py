"""`fuseforge check` judges an output or a buffer that is ~0 by cancellation against the scale of the values it was
computed from (fuseforge/evaluate/scales.py), as the verifier does: the reference's float64 truth tracks the scales
and the judge's comparisons take them. Without them a correct reordering of such an output (eager's value exactly 0,
or a running mean of centred values) failed at a floor of 1e-12."""

import textwrap

import pytest
from test_evaluate_scales import (  # the verifier's cases of the same rule
    CENTRED_BATCH_NORM_CANDIDATE,
    CENTRED_BATCH_NORM_MODEL,
    EQUAL_TERMS_CANDIDATE,
    EQUAL_TERMS_MODEL,
    HEADER,
)

from fuseforge.check.orchestrate import CheckSettings, check_files, clear_reference_cache

SETTINGS = CheckSettings(device="cpu", seeds=1, trials=3, warmup=1, build_timeout_s=120, run_timeout_s=120)
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(scope="module")
def cache():
    shared: dict = {}
    yield shared
    clear_reference_cache(shared)


def _check(tmp_path, cache, model: str, candidate: str, device: str) -> dict:
    model_path, candidate_path = tmp_path / "model.py", tmp_path / "candidate.py"
    model_path.write_text(HEADER + textwrap.dedent(model))
    candidate_path.write_text(HEADER + textwrap.dedent(candidate))
    return check_files(model_path, candidate_path, CheckSettings(**{**SETTINGS.__dict__, "device": device}), cache)


def _decisive(record: dict) -> list:
    return [f for f in record["findings"] if f["decisive"]]


@pytest.mark.parametrize("device", DEVICES)
def test_a_correct_reordering_of_an_output_that_is_zero_by_cancellation_is_correct(tmp_path, cache, device):
    record = _check(tmp_path, cache, EQUAL_TERMS_MODEL,
                    EQUAL_TERMS_CANDIDATE.format(expression="(y * 0.1) * 20 - y - y"), device)
    assert record["verdict"] == "correct", (record["reason"], _decisive(record))


@pytest.mark.parametrize("device", DEVICES)
def test_a_real_bug_in_an_output_that_is_zero_by_cancellation_is_incorrect(tmp_path, cache, device):
    record = _check(tmp_path, cache, EQUAL_TERMS_MODEL,
                    EQUAL_TERMS_CANDIDATE.format(expression="y * 2 - y - y + 0.01 * y"), device)
    assert record["verdict"] == "incorrect", record["reason"]


@pytest.mark.parametrize("device", DEVICES)
def test_a_running_mean_that_is_zero_by_cancellation_computed_in_another_order_is_correct(tmp_path, cache, device):
    record = _check(tmp_path, cache, CENTRED_BATCH_NORM_MODEL,
                    CENTRED_BATCH_NORM_CANDIDATE.format(running_mean="m * mean"), device)
    assert record["verdict"] == "correct", (record["reason"], _decisive(record))


@pytest.mark.parametrize("device", DEVICES)
def test_a_running_mean_off_by_one_percent_of_its_inputs_is_incorrect(tmp_path, cache, device):
    record = _check(tmp_path, cache, CENTRED_BATCH_NORM_MODEL,
                    CENTRED_BATCH_NORM_CANDIDATE.format(running_mean="m * (mean + 0.01 * y.abs().mean())"),
                    device)
    assert record["verdict"] == "incorrect", record["reason"]
    assert "running_mean" in record["reason"]
