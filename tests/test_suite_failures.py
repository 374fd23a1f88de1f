"""Every failure of a suite job is one line that says what failed and where, in the database and its table:
the failing stage's error from `optimize` or the build phase, never "None"."""

import io
from pathlib import Path

import torch
from rich.console import Console

from fuseforge.suite import build
from fuseforge.suite.db import Store
from fuseforge.suite.execute import REASON_MAX, failure_reason
from fuseforge.suite.fake_job import BUILD_COMMAND, RUN_COMMAND, write_model
from fuseforge.suite.jobs import SuiteConfig
from fuseforge.suite.report import NOTE_MAX, job_table
from fuseforge.suite.scheduler import run_suite

# A model that refuses to run in float64 (its forward checks the dtype it computes in): every plan of `optimize`
# fails its float64 CPU check, each plan's artefacts are moved into OUT/attempts/, and the build phase exits 1.
FLOAT32_ONLY = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.linear = nn.Linear(n, n)

    def forward(self, x):
        y = torch.relu(self.linear(x))
        if y.dtype != torch.float32:
            raise TypeError("this model computes in float32 only, got " + str(y.dtype))
        return y


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return [16]
"""
LONG_MESSAGE = "a reason far longer than the eighty columns a terminal would wrap it at, " * 3
UNLOADABLE = f"""import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x


def get_inputs():
    raise ValueError({LONG_MESSAGE!r} + "the end")


def get_init_inputs():
    return []
"""


def _suite(tmp_path, **kw) -> list[dict]:
    config = SuiteConfig(**{"models": tmp_path / "models", "db": tmp_path / "r.sqlite", "gpus": 1, "jobs": 1, **kw})
    run_suite(config, Console(file=io.StringIO(), width=120))
    store = Store(config.db)
    try:
        return store.rows()
    finally:
        store.close()


def test_a_build_phase_whose_plans_all_fail_records_the_failing_stages_error_not_none(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "float32_only.py").write_text(FLOAT32_ONLY)
    [row] = _suite(tmp_path)
    assert (row["status"], row["verdict"], row["phase"]) == ("failed", "error", "build")
    reason = row["reason"]
    assert reason.startswith("build phase exited 1: verify: "), reason
    assert "float32 only" in reason and "None" not in reason and "\n" not in reason
    out = Path(row["out_dir"])
    assert (out / "attempts").is_dir()  # optimize moved its plans' artefacts away, the log was not among them
    assert "fuseforge: float32_only.py: verify:" in (out.with_name(out.name + ".suite") / "suite_build.log").read_text()


def test_a_log_moved_away_with_the_artefacts_of_a_left_plan_cannot_take_the_reason_with_it(tmp_path):
    write_model(tmp_path / "models" / "m.py", build="stagefail")
    [row] = _suite(tmp_path, build_command=BUILD_COMMAND, run_command=RUN_COMMAND)
    assert row["reason"] == ("build phase exited 1: verify: CPU check failed: the program differs from the model "
                             "in float64: output: error 3.1e-01 > 1e-09")


def test_a_model_that_cannot_load_gets_the_load_stages_whole_line_even_through_rich(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "unloadable.py").write_text(UNLOADABLE)
    [row] = _suite(tmp_path, gpus=0)  # the run phase is `fuseforge optimize --no-gpu`, printing through rich
    assert row["reason"].startswith("run phase exited 1: load: "), row["reason"]
    assert row["reason"].endswith("the end"), row["reason"]  # one line, not a wrapped piece of it


def test_a_build_failure_names_the_compilers_first_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.version, "cuda", "13.0")  # as on a GPU machine: the build is attempted
    cand = tmp_path / "cand.py"
    cand.write_text("def _kernels():\n    raise RuntimeError(\"Error building extension 'ff': [1/2] nvcc -c k.cu\\n"
                    "FAILED: k.cuda.o\\nk.cu(12): error: identifier \\\"foo\\\" is undefined\\n"
                    "1 error detected\\nninja: build stopped\")\n")
    assert build.build_extension(cand) == build.BUILD_FAILED_EXIT
    log = tmp_path / "build.log"
    log.write_text(capsys.readouterr().out)
    assert failure_reason(log) == ("build: the CUDA extension did not compile: RuntimeError: "
                                   "k.cu(12): error: identifier \"foo\" is undefined")


def test_a_build_failure_of_a_fake_job_is_recorded_with_its_stage(tmp_path):
    write_model(tmp_path / "models" / "m.py", build="fail")
    [row] = _suite(tmp_path, build_command=BUILD_COMMAND, run_command=RUN_COMMAND)
    assert (row["verdict"], row["reason"]) == ("build_failed", "build: fake compile error")


def _log(tmp_path, *lines: str) -> Path:
    log = tmp_path / "phase.log"
    log.write_text("\n".join(lines) + "\n")
    return log


def test_the_failure_line_wins_over_what_is_printed_after_it(tmp_path):
    log = _log(tmp_path, "[05:16:05] load …", "Traceback (most recent call last):", "ValueError: inner",
               "fuseforge: m.py: capture: unsupported graph input c of kind CONSTANT_TENSOR",
               "report (of the failed run): out/report.md")
    assert failure_reason(log) == "capture: unsupported graph input c of kind CONSTANT_TENSOR"


def test_without_a_failure_line_the_failed_runs_report_names_the_stage(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("# report\n\n## Limits of this result\n\n- Forward only.\n"
                                   "- stage emit failed: no kernel for op aten.foo at node foo_3\n")
    assert failure_reason(_log(tmp_path, "something went wrong"), out) == "emit: no kernel for op aten.foo at node foo_3"


def test_without_either_the_last_python_error_is_the_reason(tmp_path):
    log = _log(tmp_path, "Traceback (most recent call last):", '  File "x.py", line 1', "torch.OutOfMemoryError: "
               "CUDA out of memory. Tried to allocate 2.00 GiB", "exiting")
    assert failure_reason(log) == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert failure_reason(tmp_path / "missing.log") is None


def test_a_long_reason_keeps_its_beginning_where_the_stage_is(tmp_path):
    reason = failure_reason(_log(tmp_path, "fuseforge: m.py: verify: CPU check failed: " + "x" * 2000))
    assert reason.startswith("verify: CPU check failed: ") and len(reason) == REASON_MAX and reason.endswith("...")


def test_the_table_shows_the_reason_up_to_its_numbers(tmp_path):
    reason = ("build phase exited 1: verify: CPU check failed: the program differs from the model in float64: "
              "output 0: max relative error 3.1e-01 at index [3, 7] (tolerance 1e-09)")
    row = {"id": 1, "job_key": "k", "kind": "optimize", "model_name": "m", "settings": '{"gpu": true}',
           "status": "failed", "verdict": "error", "reason": reason}
    _, [cells] = job_table([row])
    assert cells[-1] == reason and len(reason) <= NOTE_MAX


def test_a_verification_failure_is_recorded_with_its_case_tensor_and_numbers(tmp_path):
    from fuseforge.suite.execute import collect

    out = tmp_path / "job"
    out.mkdir()
    (out / "50_verify.json").write_text('{"verdict": "incorrect", "reason": "seed 0 / file: output: error vs fp64 '
                                        '3.1e-04 (rel. 2.0e-04) > bound 1.2e-06 (2 x eager\'s 5.0e-07 + floor 1.0e-07)"}')
    outcome = collect(out)
    assert outcome.verify["reason"].startswith("seed 0 / file: output: error vs fp64 3.1e-04")
