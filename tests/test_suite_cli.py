"""`register(app)` gives a typer app the `suite` and `report` commands, with exit codes that mean something."""

import typer
from typer.testing import CliRunner

from fuseforge.suite.cli import register
from fuseforge.suite.db import Store
from fuseforge.suite.fake_job import BUILD_COMMAND, RUN_COMMAND, write_model


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """A stand-in for fuseforge's app."""

    register(app)
    return app


def test_register_adds_suite_and_report_with_every_option_of_the_issue():
    runner = CliRunner()
    suite_help = runner.invoke(_app(), ["suite", "--help"], terminal_width=200)
    assert suite_help.exit_code == 0
    for option in ("--candidates", "--gpus", "--jobs", "--db", "--ray", "--build-timeout", "--run-timeout",
                   "--max-attempts", "--build-command", "--run-command", "--run-slots", "Exit code 0"):
        assert option in suite_help.output, option
    report_help = runner.invoke(_app(), ["report", "--help"], terminal_width=200)
    assert report_help.exit_code == 0 and "--html" in report_help.output


def test_suite_exits_0_when_every_job_reached_a_verdict_and_1_when_one_crashed_and_report_reads_the_result(tmp_path):
    runner, db = CliRunner(), tmp_path / "r.sqlite"
    args = ["suite", str(tmp_path / "models"), "--db", str(db), "--gpus", "1", "--jobs", "1",
            "--build-command", BUILD_COMMAND, "--run-command", RUN_COMMAND]
    write_model(tmp_path / "models" / "good.py", speedup=1.3)
    write_model(tmp_path / "models" / "wrong.py", run="incorrect")
    assert runner.invoke(_app(), args).exit_code == 0  # an incorrect verdict is a result, not a failure
    write_model(tmp_path / "models" / "crash.py", run="crash")
    assert runner.invoke(_app(), args).exit_code == 1
    store = Store(db)
    assert sorted((r["run_id"], r["model_name"]) for r in store.rows()) == [(1, "good"), (1, "wrong"), (2, "crash")]
    store.close()
    result = runner.invoke(_app(), ["report", str(db), "--html", str(tmp_path / "report.html")], terminal_width=250)
    assert result.exit_code == 0 and "good" in result.output and "1.30x" in result.output
    assert (tmp_path / "report.html").exists() and (tmp_path / "report_speedup.png").exists()


def test_the_run_slots_option_reaches_the_suites_configuration(tmp_path, monkeypatch):
    import fuseforge.suite.cli as suite_cli

    seen = []
    monkeypatch.setattr(suite_cli, "suite", lambda config, console=None: seen.append(config) or 0)
    result = CliRunner().invoke(_app(), ["suite", str(tmp_path), "--run-slots", "3"])
    assert result.exit_code == 0 and seen[0].run_slots == 3 and seen[0].slots_per_gpu == 3
