"""One vocabulary, one switch per kernel family: the command line's `--no-<family>` switches are made from the
registry, and each turns off its own family and no other."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fuseforge import pipeline
from fuseforge.cli import app
from fuseforge.config import OptimizeConfig
from fuseforge.families import FAMILIES, NAMES
from fuseforge.family_switches import EVERY_FLAG
from fuseforge.suite import cli as suite_cli

EVERY_FAMILY = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 1024)
        self.bn = nn.BatchNorm2d(8)
        self.conv = nn.Conv2d(3, 16, 3)

    def forward(self, x, img, pic):
        rows = torch.softmax(torch.relu(self.linear(x)), dim=-1) * 2.0  # a GEMM kernel, then a row kernel
        conv = torch.relu(self.conv(pic))  # a conv kernel
        return rows, torch.relu(self.bn(img)), torch.amin(torch.tanh(img), dim=1), conv  # channel norm, channel min


def get_inputs():
    return [torch.randn(2048, 64), torch.randn(2, 8, 5, 7), torch.randn(2, 3, 34, 64)]


def get_init_inputs():
    return []
"""


def _plan_kinds(tmp_path, monkeypatch, *switches) -> set[str]:
    """The kinds of the kernel groups `fuseforge optimize --no-gpu` plans for EVERY_FAMILY with `switches`."""
    model = tmp_path / "every_family.py"
    model.write_text(EVERY_FAMILY)
    runs, optimize = [], pipeline.optimize
    monkeypatch.setattr(pipeline, "optimize", lambda config, on_stage: runs.append(optimize(config, on_stage)) or runs[-1])
    result = CliRunner().invoke(app, ["optimize", str(model), "-o", str(tmp_path / "out"), "--no-gpu", *switches])
    assert result.exit_code == 0, result.output
    (run,) = runs
    assert not run.ladder  # the plan asked for, not a rung below it
    return {g.kind for g in run.plan.groups} - {"pointwise"}


def test_every_family_of_the_registry_has_a_switch_of_its_own_named_after_it_in_optimize_and_suite():
    flags = [f.flag for f in FAMILIES]
    assert flags == ["--no-" + name.replace("_", "-") for name in NAMES] and len(set(flags)) == len(FAMILIES)
    for command in ("optimize", "suite"):
        result = CliRunner().invoke(app, [command, "--help"], terminal_width=200)
        assert result.exit_code == 0, result.output
        assert all(flag in result.output for flag in (*flags, EVERY_FLAG)), result.output


def test_by_default_the_plan_of_a_model_with_an_anchor_of_every_family_uses_every_family(tmp_path, monkeypatch):
    assert _plan_kinds(tmp_path, monkeypatch) == set(NAMES)


@pytest.mark.parametrize("family", FAMILIES, ids=NAMES)
def test_switching_one_family_off_leaves_every_other_family_on_in_the_plan(family, tmp_path, monkeypatch):
    assert _plan_kinds(tmp_path, monkeypatch, family.flag) == set(NAMES) - {family.name}


def test_switching_every_family_off_leaves_pointwise_kernels_only(tmp_path, monkeypatch):
    assert _plan_kinds(tmp_path, monkeypatch, EVERY_FLAG) == set()


@pytest.mark.parametrize("family", FAMILIES, ids=NAMES)
def test_the_suite_hands_one_family_switch_on_to_its_jobs_as_that_switch_alone(family, tmp_path, monkeypatch):
    configs = []
    monkeypatch.setattr(suite_cli, "suite", lambda config: configs.append(config) or 0)
    result = CliRunner().invoke(app, ["suite", str(tmp_path), family.flag])
    assert result.exit_code == 0, result.output
    assert configs[0].kernel_flags == (family.flag,)


def test_a_configuration_refuses_a_family_name_that_is_not_in_the_registry():
    with pytest.raises(ValueError, match="no kernel family row_kernels"):
        OptimizeConfig(model_path=Path("m.py"), out_dir=Path("o"), families=frozenset({"row_kernels"}))
