"""The three real answers in shared/candidates get the verdicts their README describes.

answer_002 is not valid Python (CPU); on a GPU answer_000 fails to build with the compiler's error lines,
and answer_001 is correct at about the speed of eager (its GEMM is torch's, its epilogue its own kernel).
"""

from pathlib import Path

import pytest

from fuseforge.check.orchestrate import CheckSettings, check_files

SHARED = Path(__file__).resolve().parents[2] / "shared"
PROBLEMS, CANDIDATES = SHARED / "problems" / "seed", SHARED / "candidates"
pytestmark = pytest.mark.skipif(not CANDIDATES.is_dir(), reason="shared/candidates not present")


def _check(problem: str, answer: str, device: str) -> dict:
    settings = CheckSettings(device=device, seeds=2, trials=20, warmup=3, compile=False, build_timeout_s=900)
    return check_files(PROBLEMS / f"{problem}.py", CANDIDATES / f"{problem}.{answer}.py", settings)


def test_answer_002_with_prose_in_the_code_is_invalid_python_on_any_device():
    record = _check("gemm_sigmoid_scaling_residualadd", "answer_002", "cpu")
    assert record["verdict"] == "invalid_python" and record["check"] == "syntax"
    assert "answer_002.py:124" in record["reason"]


@pytest.mark.gpu
@pytest.mark.timeout(1800)
def test_answer_000_does_not_build_and_the_record_shows_the_compilers_error_lines():
    record = _check("gemm_divide_sum_scaling", "answer_000", "cuda")
    assert record["verdict"] == "build_failed", record["reason"]
    lines = record["build"]["error_lines"]
    assert lines and any("error" in line for line in lines), record["build"]
    assert "first error" in record["reason"]


@pytest.mark.gpu
@pytest.mark.timeout(1800)
def test_answer_001_is_correct_at_about_the_speed_of_eager():
    record = _check("gemm_sigmoid_scaling_residualadd", "answer_001", "cuda")
    assert record["verdict"] == "correct", record["reason"]
    assert 0.8 < record["timing"]["speedup"]["vs_eager"] < 1.25
    assert 0 < record["gpu"]["own_kernel_share"] < 0.5  # the epilogue kernel is its own, the GEMM torch's
