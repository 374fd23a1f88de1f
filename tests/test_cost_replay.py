"""The cost model against an H100 record, on the CPU (`dev/cost_replay.py`): each model planned as on the GPU
machine with the record's GPU measurements replayed, its predicted speedup vs eager next to the measured one."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "dev"))
import cost_replay  # noqa: E402

RECORD = ROOT / "bench/results/2026-11-27d_h100/conv37_jobs.tgz"  # the 37 conv models at e915562, H100


@pytest.mark.skipif(not cost_replay.PROBLEMS.exists(), reason="needs ../shared/problems")
def test_2d_short_dot_conv_models_measured_exact_fp32_are_predicted_within_25_percent_of_their_speedup():
    """65 (8 -> 64 channels, 3x3; the record measured eager's cuDNN exact-fp32 on it): eager's convolution with its
    bias priced at the exact-fp32 rate measured with the bias. Catches the no-bias rate for that call, which
    predicted 65 at 0.70 of its measured speedup. (73 and 85, the same convolution, were in this test until their
    plans changed: their conv kernels now take their norms' statistics, which this record did not measure.)"""
    rows = cost_replay.replay_record(RECORD, ["65_"])
    assert len(rows) == 1 and all("error" not in r for r in rows), rows
    assert all(r["same_plan"] for r in rows), [r["model"] for r in rows if not r["same_plan"]]
    off = {r["model"]: round(r["ratio"], 2) for r in rows if not 0.75 <= r["ratio"] <= 1.25}
    assert not off, off


SPATIAL_SUM_RECORD = ROOT / "bench/results/2026-11-28_gpu/run3_changed8_jobs.tgz"  # 8 conv models at bba9ac7, H100


@pytest.mark.skipif(not cost_replay.PROBLEMS.exists(), reason="needs ../shared/problems")
def test_a_conv_kernel_that_sums_over_the_spatial_axes_is_planned_as_on_the_gpu_and_predicted_within_25_percent():
    """67 (conv 8 -> 64, GELU, global average pool): the GPU run planned one conv kernel ending in the spatial mean
    and measured 2.00x vs eager; the replay must make the same plan (the conv family's claim_first before the row
    family) and predict within 25 %. 57 beside it: a direct conv kernel without a sum, 3.62x."""
    rows = cost_replay.replay_record(SPATIAL_SUM_RECORD, ["67_", "57_"])
    assert len(rows) == 2 and all("error" not in r for r in rows), rows
    assert all(r["same_plan"] for r in rows), [r["model"] for r in rows if not r["same_plan"]]
    off = {r["model"]: round(r["ratio"], 2) for r in rows if not 0.75 <= r["ratio"] <= 1.25}
    assert not off, off


NORM_RECORD = ROOT / "bench/results/2026-11-28b_gpu/run2_norms_jobs.tgz"  # the norm models at b084e30, H100


@pytest.mark.skipif(not cost_replay.PROBLEMS.exists(), reason="needs ../shared/problems")
def test_a_conv_kernel_that_takes_its_norms_statistics_is_planned_as_on_the_gpu_and_predicted_within_25_percent():
    """73 (conv 8 -> 64, batch norm, scale) and 85 (conv 8 -> 64, group norm, scale; then a pool): the GPU run planned
    each convolution as one direct kernel that stores its output and takes the norm's sums, the channel kernels
    only normalising, and measured 2.15x and 1.79x vs eager; the replay must make the same plans (the conv family's
    claim_first before the channel-norm family) and predict within 25 %."""
    rows = cost_replay.replay_record(NORM_RECORD, ["73_", "85_"])
    assert len(rows) == 2 and all("error" not in r for r in rows), rows
    assert all(r["same_plan"] for r in rows), [r["model"] for r in rows if not r["same_plan"]]
    off = {r["model"]: round(r["ratio"], 2) for r in rows if not 0.75 <= r["ratio"] <= 1.25}
    assert not off, off


TRANSPOSED_RECORD = ROOT / "bench/results/2026-11-28c_gpu/run3_jobs.tgz"  # the transposed models at 78f20bb, H100


@pytest.mark.skipif(not cost_replay.PROBLEMS.exists(), reason="needs ../shared/problems")
def test_a_stride_1_transposed_conv_kernel_is_planned_as_on_the_gpu_and_a_stride_2_one_is_left_to_cudnn():
    """61 (transposed 3-D conv 64 -> 128, stride 1, relu, group norm): the GPU run planned one tensor-core kernel of
    one parity class and measured 1.90x vs eager; the replay must make that plan and predict within 25 %. 93
    (transposed 2-D conv, stride 2): the run's kernel plan measured 0.67x of compile; priced at its measured strided
    store rate, the replay must not plan that kernel again (a plan other than the record's)."""
    rows = {r["model"][:3]: r for r in cost_replay.replay_record(TRANSPOSED_RECORD, ["61_", "93_"])}
    assert set(rows) == {"61_", "93_"} and all("error" not in r for r in rows.values()), rows
    assert rows["61_"]["same_plan"] and 0.75 <= rows["61_"]["ratio"] <= 1.25, rows["61_"]
    assert not rows["93_"]["same_plan"], rows["93_"]
