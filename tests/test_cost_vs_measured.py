"""scripts/cost_vs_measured.py: the cost model's prediction against a recorded measurement, offline."""

import subprocess
import sys
from pathlib import Path

from conftest import PROBLEMS

ROOT = Path(__file__).resolve().parents[1]


def test_the_offline_cost_table_prices_a_recorded_model_with_its_measured_convolution(tmp_path):
    """Catches the script going stale against the cost model's interface: one conv model of the H100 record,
    predicted with the rates and with the probe's measured convolution, both finite and the table written."""
    out = tmp_path / "table.md"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts/cost_vs_measured.py"),
         str(ROOT / "bench/results/2026-11-27d_h100/conv37_e915562.sqlite"),
         "--conv-times", str(ROOT / "bench/results/2026-11-27c_h100/conv_times.json"),
         "--models", str(PROBLEMS), "--only", "57_Conv2d_ReLU_HardSwish", "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    (row,) = [line for line in out.read_text().splitlines() if line.startswith("| 57_")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "3.67x" and cells[4].endswith("(1 conv)")  # the record's speedup; one conv measured
    assert 0.5 < float(cells[3]) < 2 and 0.5 < float(cells[5]) < 2
    assert "Within +-25 %" in out.read_text()
