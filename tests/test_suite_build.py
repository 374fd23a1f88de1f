"""The suite's default commands on real (tiny) model files, without a GPU: build phase, roofline floor."""

import io
import json
from pathlib import Path

import pytest
import torch
from conv_group_checks import SMALL_CONV
from rich.console import Console

from fuseforge.capture import capture
from fuseforge.load import load_model_file
from fuseforge.suite import build
from fuseforge.suite.db import Store
from fuseforge.suite.jobs import SuiteConfig
from fuseforge.suite.scheduler import run_suite

TINY = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.linear = nn.Linear(n_in, n_out)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return [64, 32]
"""


def test_the_roofline_floor_counts_gemm_flops_and_reads_every_input_and_parameter_once(tmp_path):
    (tmp_path / "tiny.py").write_text(TINY)
    roof = build.roofline(capture(load_model_file(tmp_path / "tiny.py")))
    assert roof["flops"] == 2 * 16 * 32 * 64 + 16 * 32  # the GEMM, then one per relu output
    assert roof["min_bytes"] == 4 * (16 * 64 + 32 * 64 + 32 + 16 * 32)  # x, weight, bias in; output out
    c = roof["ceilings"]
    compute = 2 * 16 * 32 * 64 / c["tf32_flops"] + 16 * 32 / c["sgemm_flops"]  # the GEMM at the tensor cores' rate
    assert roof["compute_ms"] == pytest.approx(compute * 1e3)
    assert roof["floor_ms"] == pytest.approx(max(compute, roof["min_bytes"] / c["bandwidth"]) * 1e3)


def test_a_candidate_that_is_not_valid_python_does_not_build_and_one_without_kernels_does(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "13.0")  # as on a GPU machine: the build is attempted
    prose = tmp_path / "prose.py"
    prose.write_text("Here is the optimized code:\nclass ModelNew(nn.Module):\n")
    assert build.build_extension(prose) == build.BUILD_FAILED_EXIT
    plain = tmp_path / "plain.py"
    plain.write_text("class ModelNew:\n    pass\n")
    assert build.build_extension(plain) == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine where no GPU answers (the CI machine)")
def test_the_default_commands_run_a_real_model_through_the_cpu_stages_when_no_gpu_answers(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny.py").write_text(TINY)
    config = SuiteConfig(models=tmp_path / "models", db=tmp_path / "r.sqlite", gpus=1, jobs=1)
    result = run_suite(config, Console(file=io.StringIO()))
    [row] = Store(config.db).rows()
    assert (row["status"], row["verdict"], result.exit_code) == ("done", "cpu_only", 0), row["reason"]
    assert "saw no GPU" in row["reason"]  # CPU torch: optimize fell back to its CPU stages
    job_dir = Path(row["out_dir"])
    suite_dir = job_dir.with_name(job_dir.name + ".suite")  # the suite's own files, beside the job's
    assert (job_dir / "40_model_new.py").exists() and (job_dir / "report.md").exists()
    assert not list(job_dir.rglob("suite_*.log")) and not (job_dir / "torch_extensions").exists()
    assert "CPU build: no CUDA extension to prebuild" in (suite_dir / "suite_build.log").read_text()
    assert (suite_dir / "suite_run.log").exists()
    assert json.loads((job_dir / "suite_roofline.json").read_text())["flops"] == row["flops"] > 0


# 2048 x 1024 outputs (128 tiles of 128 x 128) over K = 64: a GEMM kernel in the default plan
GEMM_MODEL = TINY.replace("torch.randn(16, 64)", "torch.randn(2048, 64)").replace("return [64, 32]", "return [64, 1024]")


def test_with_a_kernel_family_turned_off_both_phases_plan_without_it_and_the_build_builds_what_the_run_runs(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny.py").write_text(GEMM_MODEL)
    config = SuiteConfig(models=tmp_path / "models", db=tmp_path / "r.sqlite", gpus=1, jobs=1,
                         kernel_flags=("--no-gemm",))
    build_template, run_template = config.commands()
    assert build_template.endswith(" --no-gemm") and "--no-gemm" in run_template.split()
    assert "--no-gemm" not in " ".join(SuiteConfig(models=tmp_path, candidates=tmp_path,
                                                           kernel_flags=("--no-gemm",)).commands())
    run_suite(config, Console(file=io.StringIO()))
    [row] = Store(config.db).rows()
    job_dir = Path(row["out_dir"])
    assert row["verdict"] == "cpu_only", row["reason"]
    assert "gemm kernel" not in (job_dir / "20_partition.txt").read_text().lower()


def test_the_build_module_takes_optimize_s_kernel_family_flags_and_plans_with_every_family_by_default(tmp_path):
    model = tmp_path / "tiny.py"
    model.write_text(GEMM_MODEL)
    assert build.main([str(model), str(tmp_path / "default"), "--no-extension"]) == 0
    assert build.main([str(model), str(tmp_path / "off"), "--no-extension", "--no-gemm"]) == 0
    assert "gemm kernel" not in (tmp_path / "off" / "20_partition.txt").read_text().lower()
    assert "gemm kernel" in (tmp_path / "default" / "20_partition.txt").read_text().lower()



def test_suite_every_kernel_reaches_both_phases_and_the_build_plans_the_kernel_the_cost_model_would_not(tmp_path):
    """`suite --every-kernel`: the flag goes into both phases' commands (so into the job key too), and the build
    module plans a small convolution, which the cost model leaves to cuDNN, as a conv kernel."""
    config = SuiteConfig(models=tmp_path, db=tmp_path / "r.sqlite", kernel_flags=("--every-kernel",))
    assert all(t.split()[-1] == "--every-kernel" for t in config.commands())
    model = tmp_path / "small_conv.py"
    model.write_text(SMALL_CONV)
    assert build.main([str(model), str(tmp_path / "costed"), "--no-extension"]) == 0
    assert build.main([str(model), str(tmp_path / "every"), "--no-extension", "--every-kernel"]) == 0
    assert "kernel fused_conv2d" not in (tmp_path / "costed" / "20_partition.txt").read_text()
    assert "kernel fused_conv2d_add_relu: conv2d" in (tmp_path / "every" / "20_partition.txt").read_text()
