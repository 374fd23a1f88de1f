"""The verifier's float64 truth is the model's float64 run: on 150 generated models (the GPU campaign's first
seeds, which hold an eval-mode rrelu, dropout, bernoulli and rand_like draws, norms and in-place ops), no model's
eager fp32 run is far from a truth that also differs from a plain float64 run (`dev/truth_audit.py`). With the
truth's rrelu returning its input (the bug of Float32Draws before c5bd23d) fuzz_040042 is such a suspect."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dev"))
import truth_audit  # noqa: E402


def test_no_generated_model_has_a_truth_that_is_not_its_float64_run():
    suspects, _, failed = truth_audit.run(40000, 150, 1e-4)
    assert suspects == [] and failed == [], (suspects, failed)
