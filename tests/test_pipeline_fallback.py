"""A plan with the kernel families that fails a check falls back to the plan without them; nothing is lost."""

from pathlib import Path

import pytest

from fuseforge import pipeline
from fuseforge.config import OptimizeConfig
from fuseforge.pipeline import FIRST_ATTEMPT, StageFailed, optimize

LINEAR_RELU = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 1024)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(2048, 64)]  # 16 x 8 tiles: a GEMM kernel by default


def get_init_inputs():
    return []
"""


@pytest.fixture
def model(tmp_path) -> Path:
    path = tmp_path / "linear_relu.py"
    path.write_text(LINEAR_RELU)
    return path


def _codegen_fails_with_a_gemm_kernel(monkeypatch):
    generate = pipeline.generate

    def failing(plan, graph, name):
        if any(g.gemm for g in plan.groups):
            raise RuntimeError("injected: the GEMM kernel does not build")
        return generate(plan, graph, name)

    monkeypatch.setattr(pipeline, "generate", failing)


def test_a_failing_plan_with_kernel_families_falls_back_to_the_plan_without_them_and_keeps_the_first_attempt(
        model, tmp_path, monkeypatch):
    _codegen_fails_with_a_gemm_kernel(monkeypatch)
    out = tmp_path / "out"
    run = optimize(OptimizeConfig(model_path=model, out_dir=out, gpu=False))
    assert run.config.families == () and not any(g.gemm for g in run.plan.groups)
    assert run.cpu_check.passed and (out / "40_model_new.py").exists()
    first = out / FIRST_ATTEMPT
    assert "gemm kernel" in (first / "20_partition.txt").read_text()  # the failed plan, kept
    assert not (first / "40_model_new.py").exists()  # it failed before emitting
    report = (out / "report.md").read_text()
    assert "failed at codegen: injected: the GEMM kernel does not build" in report and FIRST_ATTEMPT in report


def test_without_a_failure_the_plan_keeps_its_kernel_families_and_sets_nothing_aside(model, tmp_path):
    out = tmp_path / "out"
    run = optimize(OptimizeConfig(model_path=model, out_dir=out, gpu=False))
    assert run.config.families == ("row_kernels", "channel_kernels", "gemm_kernels")
    assert any(g.gemm for g in run.plan.groups) and not (out / FIRST_ATTEMPT).exists()


def test_a_failure_that_does_not_depend_on_the_families_is_not_retried(tmp_path, monkeypatch):
    broken = tmp_path / "broken.py"
    broken.write_text(LINEAR_RELU.replace("def get_inputs", "def get_inputs_misspelt"))
    with pytest.raises(StageFailed) as failed:
        optimize(OptimizeConfig(model_path=broken, out_dir=tmp_path / "out", gpu=False))
    assert failed.value.stage == "load" and not (tmp_path / "out" / FIRST_ATTEMPT).exists()


def test_with_the_families_turned_off_a_failure_is_final(model, tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "generate", lambda *a: (_ for _ in ()).throw(RuntimeError("injected")))
    config = OptimizeConfig(model_path=model, out_dir=tmp_path / "out", gpu=False).without_families()
    with pytest.raises(StageFailed) as failed:
        optimize(config)
    assert failed.value.stage == "codegen" and not (tmp_path / "out" / FIRST_ATTEMPT).exists()


def test_the_command_line_shows_the_fallback_as_a_stage_and_exits_0_with_the_plan_without_families(
        model, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from fuseforge.cli import app

    _codegen_fails_with_a_gemm_kernel(monkeypatch)
    result = CliRunner().invoke(app, ["optimize", str(model), "-o", str(tmp_path / "out"), "--no-gpu"])
    assert result.exit_code == 0, result.output
    assert "fallback without row_kernels, channel_kernels, gemm_kernels" in result.output
    assert (tmp_path / "out" / "40_model_new.py").exists()
