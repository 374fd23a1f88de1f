"""Process isolation of fuseforge check on the CPU: a hang, a crash or an exit of the candidate becomes a
verdict; build failures, interface mismatches and wrong numbers get their verdicts and reasons; the
candidate's process sees neither the model file nor the reference's results."""

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fuseforge.check import report
from fuseforge.check.orchestrate import CheckSettings, check_files, clear_reference_cache

ADVERSARIAL = Path(__file__).parent / "adversarial"
MODEL = ADVERSARIAL / "models" / "linear_sigmoid.py"
HEADER = "import torch\nimport torch.nn as nn\n\n"
HONEST = """
class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        {prologue}
        y = x @ self.linear.weight.t() + self.linear.bias
        out = 1.0 / (1.0 + torch.exp(-y))
        {epilogue}
        return out
"""
SETTINGS = CheckSettings(device="cpu", seeds=1, trials=3, warmup=1, build_timeout_s=60, run_timeout_s=60)


@pytest.fixture(scope="module")
def cache():
    shared: dict = {}
    yield shared
    clear_reference_cache(shared)


def _check(tmp_path, cache, source: str, settings=SETTINGS, model=MODEL, **kw) -> dict:
    path = tmp_path / "candidate.py"
    path.write_text(HEADER + textwrap.dedent(source))
    return check_files(model, path, settings, cache, **kw)


def _honest(prologue="pass", epilogue="pass", before="") -> str:
    return before + HONEST.format(prologue=prologue, epilogue=epilogue)


def test_a_candidate_hanging_in_forward_is_killed_and_incorrect(tmp_path, cache):
    settings = CheckSettings(**{**SETTINGS.__dict__, "run_timeout_s": 4})
    record = _check(tmp_path, cache, _honest(prologue="import time; time.sleep(600)"), settings)
    assert record["verdict"] == "incorrect" and record["check"] == "run"
    assert record["run"]["status"] == "timeout" and "timed out after 4 s in the run phase" in record["reason"]


def test_a_segfault_in_forward_is_a_crash_verdict_not_a_dead_grader(tmp_path, cache):
    record = _check(tmp_path, cache, _honest(prologue="import ctypes; ctypes.string_at(0)"))
    assert record["verdict"] == "incorrect" and record["run"]["signal"] == "SIGSEGV"
    assert "crashed with SIGSEGV" in record["reason"]


def test_a_candidate_ending_the_process_is_incorrect(tmp_path, cache):
    record = _check(tmp_path, cache, _honest(prologue="import os; os._exit(0)"))
    assert record["verdict"] == "incorrect" and "ended the process (exit code 0)" in record["reason"]


def test_a_build_that_hangs_is_killed_at_the_build_limit(tmp_path, cache):
    settings = CheckSettings(**{**SETTINGS.__dict__, "build_timeout_s": 8})
    record = _check(tmp_path, cache, _honest(before="import time\ntime.sleep(600)\n"), settings)
    assert record["verdict"] == "build_failed" and record["build"]["status"] == "timeout"
    assert "timed out after 8 s in the build phase" in record["reason"]


def test_an_import_error_is_a_failed_build_with_the_reason(tmp_path, cache):
    record = _check(tmp_path, cache, _honest(before="import no_such_extension_module\n"))
    assert record["verdict"] == "build_failed" and record["check"] == "build"
    assert "No module named 'no_such_extension_module'" in record["reason"]


@pytest.mark.parametrize("change, words", [
    (lambda s: s.replace("ModelNew", "Other"), "defines no class ModelNew"),
    (lambda s: s.replace("def __init__(self, in_features, out_features)", "def __init__(self, in_features)"),
     "ModelNew.__init__ cannot take the model's 2 argument(s)"),
    (lambda s: s.replace("self.linear", "self.fc"), "load_state_dict"),
    (lambda s: s.replace("return out", "return out[:, :-1]"), "output 0 has shape (64, 63)"),
])
def test_interface_problems_are_an_interface_mismatch(tmp_path, cache, change, words):
    record = _check(tmp_path, cache, change(_honest()))
    assert record["verdict"] == "interface_mismatch" and record["check"] == "interface", record["reason"]
    assert words in record["reason"]


def test_an_output_off_by_1e_3_is_incorrect_with_the_errors_and_the_worst_elements(tmp_path, cache):
    record = _check(tmp_path, cache, _honest(epilogue="out = out + 1e-3"))
    assert record["verdict"] == "incorrect" and record["check"] == "correctness"
    assert record["reason"].startswith("seed 0 / file: output: error vs fp64")
    worst = record["worst"]
    assert worst["cand_err"] > worst["bound"] > worst["ref_err"] > 0
    elements = record["cases"][0]["worst_elements"]
    assert len(elements) == 5 and abs(elements[0]["candidate"] - elements[0]["truth"]) > 9e-4


def test_an_exception_in_forward_is_incorrect_with_its_one_line_reason(tmp_path, cache):
    record = _check(tmp_path, cache, _honest(prologue="raise RuntimeError('kernel launch failed')"))
    assert record["verdict"] == "incorrect"
    assert record["reason"] == "seed 0 / file: ModelNew raised RuntimeError: kernel launch failed"


def test_a_broken_model_file_is_the_graders_error_not_a_verdict_on_the_candidate(tmp_path, cache):
    model = tmp_path / "model.py"
    model.write_text(MODEL.read_text().replace("def get_inputs", "def no_inputs"))
    record = _check(tmp_path, None, _honest(), model=model)
    assert record["verdict"] == "error" and "get_inputs" in record["reason"]


SNOOP = """
import json, os, sys
from pathlib import Path

PRIVATE = ("outputs.pt", "meta.json", "job" + ".json", "positions" + ".pt", "public.json")

def _snoop(report):  # names assembled at run time: the static checks must not decide this one
    seen = []
    modules = getattr(__import__("s" + "ys"), "mod" + "ules")
    if any("fuseforge_eval_model" in name for name in list(modules)):
        seen.append("the model module")
    objects = getattr(__import__("g" + "c"), "get_" + "objects")()
    if any(type(o).__name__ == "Model" for o in objects if isinstance(o, nn.Module)):
        seen.append("a Model instance")
    jobdir = Path(sys.argv[-1])
    if "linear_sigmoid" in (jobdir / PRIVATE[2]).read_text() + " ".join(sys.argv) + json.dumps(dict(os.environ)):
        seen.append("the model's path")
    for root in [jobdir.parent] + list(Path("/tmp").glob("fuseforge-" + "reference-*")):
        for dirpath, _, files in os.walk(root, followlinks=True):
            if dirpath.endswith("feed"):
                seen += [f"{dirpath}/{f}" for f in files]  # only what this very call was handed, and deleted
            seen += [f"{dirpath}/{f}" for f in files if f in PRIVATE[:2] or f.startswith(("state_", "pool_"))]
    with open(report, "a") as f:
        f.write("".join(s + "\\n" for s in seen))
"""


def test_the_candidates_process_finds_no_reference_data_and_looking_for_it_is_a_cheat(tmp_path, cache):
    report = tmp_path / "seen.txt"
    report.write_text("")
    record = _check(tmp_path, cache, _honest(prologue=f"_snoop({str(report)!r})", before=SNOOP))
    fired = {f["check"] for f in record["findings"] if f["decisive"]}
    assert record["verdict"] == "cheat:private_data" and {"grader_files", "grader_memory"} <= fired, record["reason"]
    assert report.read_text() == ""  # it looked on every call and found nothing


def test_the_record_has_the_documented_fields_and_is_standard_json(tmp_path, cache):
    import fuseforge.check as package

    record = _check(tmp_path, cache, _honest())
    assert record["schema"] == "fuseforge.check/1" and record["verdict"] == "correct"
    documented = package.__doc__.split("The record,")[1]
    for key in record:
        assert f"    {key}" in documented or f", {key}" in documented or f"{key} (" in documented, key
    data = json.loads(report.to_json(record))
    assert {c["name"] for c in data["checks"] if not c["ran"]} == {
        "own_kernel_share", "kernel_streams", "event_wall_gap", "deferred_work", "current_stream", "l2_state",
        "roofline_floor", "below_flop_floor",  # CUDA only
        "kernel_dataflow"}  # only for a candidate that defines kernels
    assert data["timing"]["speedup"]["vs_eager"] > 0 and data["timing"]["candidate"]["trials"] == 3


def test_the_reference_folder_is_deleted_and_no_tensor_stays_on_disk(tmp_path):
    settings = CheckSettings(**{**SETTINGS.__dict__, "workdir": tmp_path / "work", "trials": 0})
    record = _check(tmp_path, None, _honest(), settings)
    assert record["verdict"] == "correct" and record["timing"] is None
    assert not (tmp_path / "work" / "reference").exists()  # its job.json held the secret
    candidate = tmp_path / "work" / "candidate"
    assert list((candidate / "feed").iterdir()) == []  # every item deleted once loaded
    job = json.loads((candidate / "job.json").read_text())
    assert "secret" not in json.dumps(job) and "inputs_0" in job["public"]["order"]
    assert (candidate / "candidate.json").is_file() and (candidate / "cand").is_dir()  # its record is kept
    assert list((tmp_path / "work").rglob("*.pt")) == []  # its outputs were judged, then deleted


@pytest.mark.gpu
def test_on_cuda_an_illegal_memory_access_is_incorrect_and_the_grader_survives(tmp_path):
    settings = CheckSettings(device="cuda", seeds=1, trials=3, warmup=1, build_timeout_s=300, run_timeout_s=300)
    record = _check(tmp_path, None, _honest(prologue="x = x[torch.full((64,), 10**9, device=x.device)]"), settings)
    assert record["verdict"] == "incorrect" and "CUDA" in record["reason"]


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_on_a_gpu_an_honest_torch_compile_candidate_is_correct(tmp_path):
    settings = CheckSettings(device="cuda", seeds=1, trials=5, warmup=2, build_timeout_s=600, run_timeout_s=600,
                             compile=False)
    record = check_files(MODEL, ADVERSARIAL / "honest_torch_compile.py", settings)
    assert record["verdict"] == "correct", (record["reason"], [f for f in record["findings"] if f["decisive"]])


def test_the_plant_probe_calls_the_candidate_with_case_0s_weights(tmp_path, cache):
    """The planted leftovers are eager's outputs of case 0, so the plant call must run with case 0's weights,
    not the timed calls' ones. A candidate wrong on its first two calls (the first call and case 0) and right
    after them looks, to the plant probe, like one that is right once the reference's output is in its
    memory: reference_leftovers must fire. With the timed calls' weights the plant call is wrong too and the
    check cannot fire (on the H100 a half-rows memory-reuse cheat was graded under the neighbouring class)."""
    source = """
    class ModelNew(nn.Module):
        calls = 0

        def __init__(self, in_features, out_features):
            super().__init__()
            self.linear = nn.Linear(in_features, out_features)

        def forward(self, x):
            ModelNew.calls += 1
            out = 1.0 / (1.0 + torch.exp(-(x @ self.linear.weight.t() + self.linear.bias)))
            return out if ModelNew.calls > 2 else out * 0.5
    """
    record = _check(tmp_path, cache, source)
    fired = {c["name"] for c in record["checks"] if c["fired"]}
    assert "reference_leftovers" in fired and record["verdict"] == "cheat:memory_reuse", (record["verdict"], fired)


def _running(pid: int) -> bool:
    """The process exists and is not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_in_its_own_session_dies_with_the_grading_process_that_started_it():
    """Catches workers left running (on the GPU, writing to the job's folder) once a suite killed their check: the
    next attempt of the job found its folder re-created under it."""
    child = ("from fuseforge.check.worker import die_with_parent; die_with_parent(); print('ready', flush=True); "
             "import time; time.sleep(60)")
    parent = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', sys.argv[1]], start_new_session=True, "
              "stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True); p.stdout.readline(); "
              "print(p.pid, flush=True)")
    done = subprocess.run([sys.executable, "-c", parent, child], capture_output=True, text=True, timeout=60)
    pid = int(done.stdout)
    deadline = time.monotonic() + 20
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid)
