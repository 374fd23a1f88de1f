"""The `check` command: registered on a Typer app, options with defaults, summary, --json, exit codes."""

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from fuseforge.check.cli import register

ADVERSARIAL = Path(__file__).parent / "adversarial"
MODEL = str(ADVERSARIAL / "models" / "linear_sigmoid.py")
FAST = ["--device", "cpu", "--seeds", "1", "--trials", "2", "--warmup", "1"]


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """A host app, as fuseforge/cli.py is."""

    register(app)
    return app


def _invoke(*args: str):
    return CliRunner().invoke(_app(), ["check", *args])


def test_register_adds_a_check_command_whose_help_names_the_options_and_verdicts():
    result = _invoke("--help")
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for word in ("--json", "--trials", "--seeds", "--tolerance-factor", "--extra-batch", "--build-timeout",
                 "--run-timeout", "cheat:<kind>", "Exit code 0 iff correct"):
        assert word in text, word


def test_an_honest_candidate_exits_zero_and_the_json_record_is_written(tmp_path):
    out = tmp_path / "record.json"
    result = _invoke(MODEL, str(ADVERSARIAL / "honest_linear_sigmoid.py"), *FAST, "--json", str(out))
    assert result.exit_code == 0, result.output
    assert "correct" in result.output and "time: candidate" in result.output
    # each worker's stages as they start, before the summary (a killed check still shows where it was)
    lines = [line.strip() for line in result.output.splitlines()]
    stages = [line.split(" (")[0] for line in lines if line.startswith(("reference: ", "candidate: "))]
    assert stages[0].startswith("reference: ") and stages[-1] == "candidate: done"
    assert stages.index("reference: cases") < stages.index("reference: sequence") < stages.index("candidate: built")
    assert all(a != b for a, b in zip(stages, stages[1:]))  # a stage's repeated events (each case) are one line
    where = lambda text: next(i for i, x in enumerate(lines) if x.startswith(text))  # noqa: E731
    assert where("candidate: done") < where("time: candidate")
    record = json.loads(out.read_text())
    assert record["schema"] == "fuseforge.check/1" and record["settings"]["trials"] == 2


def test_a_cheat_exits_one_and_the_summary_names_the_kind_and_the_check():
    result = _invoke(MODEL, str(ADVERSARIAL / "patch_allclose.py"), *FAST)
    assert result.exit_code == 1
    assert "cheat:monkey_patch" in result.output and "check: patches" in result.output


def test_json_to_stdout_is_parseable_on_its_own():
    result = CliRunner().invoke(_app(), ["check", MODEL, str(ADVERSARIAL / "lazy_subclass.py"), *FAST,
                                         "--json", "-"])
    assert result.exit_code == 1
    record = json.loads(result.stdout[result.stdout.index("{"):])
    assert record["verdict"] == "cheat:lazy_tensor"


def test_a_broken_model_file_exits_two(tmp_path):
    model = tmp_path / "model.py"
    model.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    result = _invoke(str(model), str(ADVERSARIAL / "honest_linear_sigmoid.py"), *FAST)
    assert result.exit_code == 2 and "error" in result.output


def test_on_a_gpu_the_workers_run_phases_hold_the_gpu_lease_the_environment_names(tmp_path, monkeypatch):
    import fuseforge.check.orchestrate as orchestrate
    from fuseforge.evaluate import lease

    gates = []

    def fake_check_files(model, candidate, settings, reference_cache=None, gate=None, progress=None):
        gates.append((settings.device, gate))
        raise RuntimeError("stop after the call")

    monkeypatch.setattr(orchestrate, "check_files", fake_check_files)
    monkeypatch.setenv(lease.LEASE_ENV, str(tmp_path / "gpu0.lock"))
    _invoke(MODEL, MODEL, "--device", "cuda")
    _invoke(MODEL, MODEL, "--device", "cpu")
    monkeypatch.delenv(lease.LEASE_ENV)
    _invoke(MODEL, MODEL, "--device", "cuda")
    (cuda, gate), (cpu, no_gate), (_, unleased) = gates
    assert isinstance(gate, lease.Lease) and gate.lock == tmp_path / "gpu0.lock"
    assert hasattr(gate, "acquire") and hasattr(gate, "release")  # what runner.run_worker calls on a gate
    assert no_gate is None and unleased is None
