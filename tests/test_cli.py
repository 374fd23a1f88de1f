"""The command line: help for newcomers, exit codes that mean what they say."""

import subprocess
import sys

from conftest import SEED_MODELS


def _fuseforge(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "fuseforge", *args], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


def test_optimize_help_names_every_option_and_the_exit_code_rule():
    result = _fuseforge("optimize", "--help")
    assert result.returncode == 0
    for word in ("--out", "--no-gpu", "--seeds", "--trials", "--no-compile", "Exit code 0"):
        assert word in result.stdout, word


def test_optimize_without_a_gpu_exits_zero_and_writes_the_report_but_no_model_new(tmp_path):
    seed = next(p for p in SEED_MODELS if p.stem == "gemm_sigmoid_scaling_residualadd")
    result = _fuseforge("optimize", str(seed), "-o", str(tmp_path), "--no-gpu")
    assert result.returncode == 0, result.stderr
    report = (tmp_path / "report.md").read_text()
    assert "not run (--no-gpu)" in report
    assert "## Operators left unchanged, and why" in report
    assert not (tmp_path / "model_new.py").exists()


def test_optimize_of_a_broken_file_exits_one_with_the_reason(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    result = _fuseforge("optimize", str(bad), "-o", str(tmp_path / "out"), "--no-gpu")
    assert result.returncode == 1
    assert "missing get_inputs, get_init_inputs" in result.stderr.replace("\n", " ")
