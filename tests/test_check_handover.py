"""What the candidate's process can reach of the grader: the hand-over of its data item by item (feed.py),
the audit hook that sees the candidate's code reach for the grader's files and memory (audit.py), the
worker's environment and working directory (runner.py), and the secret the reference draws from."""

import json
import logging
import os
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch

from fuseforge.check import feed, runner
from fuseforge.check.audit import Audit
from fuseforge.check.orchestrate import CheckSettings, make_non_dumpable
from fuseforge.check.reference_role import random_state, secret_seed
from fuseforge.evaluate import harness

MODEL = Path(__file__).parent / "adversarial" / "models" / "linear_sigmoid.py"


class _Events:
    def __init__(self):
        self.events = []

    def event(self, name, **data):
        self.events.append({"event": name, **data})


def _server(tmp_path, names=("a", "b", "c"), release=False):
    items = {n: feed.to_bytes(torch.full((2,), float(i))) for i, n in enumerate(names)}
    return feed.FeedServer(tmp_path, items, list(names), release=release)


def test_an_item_is_written_only_when_asked_for_and_the_worker_deletes_it_once_loaded(tmp_path):
    server, io = _server(tmp_path), _Events()
    client = feed.FeedClient(tmp_path, io)
    assert list((tmp_path / "feed").iterdir()) == []  # nothing is there before it is asked for
    thread = threading.Thread(target=lambda: server.on_need(["a", "b"]))
    thread.start()
    a, b = client.get("a", "b")
    thread.join()
    assert io.events == [{"event": "need", "names": ["a", "b"]}]
    assert torch.equal(a, torch.zeros(2)) and torch.equal(b, torch.ones(2))
    assert list((tmp_path / "feed").iterdir()) == [] and server.anomalies == []


@pytest.mark.parametrize("asks, anomaly", [
    (["b", "a"], "'a': asked for after 'b'"),
    (["a", "a"], "'a': asked for a second time"),
    (["z"], "'z': not an item of the plan"),
])
@pytest.mark.parametrize("release", [False, True])
def test_an_item_asked_for_twice_out_of_order_or_unknown_is_refused_and_recorded(tmp_path, asks, anomaly, release):
    server = _server(tmp_path, release=release)
    server.on_need(asks)
    assert any(a.startswith(anomaly) for a in server.anomalies), server.anomalies
    refused = asks[-1]
    assert torch.load(tmp_path / "feed" / f"{refused}.pt", weights_only=True) is None
    client = feed.FeedClient(tmp_path, _Events())
    with pytest.raises(feed.FeedRefused):  # the worker stops rather than go on without the item
        client.one(refused) if refused != asks[0] else client.get(*asks)


def test_a_released_item_is_let_go_once_handed_over_and_its_file_closed(tmp_path):
    """Catches a check that keeps every input set of a model on the disk until its end (about 13 GB for a model with
    0.5 GB inputs): an item in a file (LazyItem) is dropped and its file closed once written for the worker."""
    from fuseforge.check.orchestrate import LazyItem

    path = tmp_path / "inputs_0.pt"
    path.write_bytes(feed.to_bytes(torch.arange(4.0)))
    item = LazyItem(path)
    path.unlink()  # as the reference's folder is deleted: the open file alone holds the data
    server = feed.FeedServer(tmp_path, {"inputs_0": item, "b": feed.to_bytes(1)}, ["inputs_0", "b"], release=True)
    server.on_need(["inputs_0"])
    assert item.file.closed and list(server.items) == ["b"]
    assert torch.equal(torch.load(tmp_path / "feed" / "inputs_0.pt", weights_only=True), torch.arange(4.0))


def test_skipping_items_is_allowed_only_forward(tmp_path):
    server = _server(tmp_path)
    server.on_need(["a"])
    server.on_need(["c"])
    assert server.served == ["a", "c"] and server.anomalies == []


@pytest.fixture
def audit(tmp_path):
    jobdir = tmp_path / "work" / "candidate"
    jobdir.mkdir(parents=True)
    (jobdir / "job.json").write_text("{}")
    audit = Audit(jobdir, Path(__file__))
    audit.install()  # audit hooks cannot be removed: this one stays inactive outside its scope
    return audit, jobdir


def test_the_audit_hook_sees_the_grader_s_folders_however_they_are_reached(audit, tmp_path):
    audit, jobdir = audit
    link = tmp_path / "innocent"
    link.symlink_to(jobdir)
    with audit.candidate():
        (link / "job.json").read_text()  # through a symlink
        os.listdir(jobdir.parent)
        list((tmp_path / "work").glob("*"))
    assert any("job.json" in f for f in audit.files) and any("listdir" in f or "scandir" in f
                                                               for f in audit.files), audit.files


def test_the_audit_hook_sees_the_parent_process_and_this_process_s_memory(audit):
    audit, _ = audit
    with audit.candidate():
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            f.read()
    assert audit.files == [f"open('/proc/{os.getppid()}/cmdline')"]
    assert audit.forbidden("/proc/self/mem") and not audit.forbidden("/proc/self/status")
    assert not audit.forbidden(str(Path(__file__)))


def test_outside_the_candidate_s_scope_nothing_is_recorded(audit):
    audit, jobdir = audit
    (jobdir / "job.json").read_text()
    sys._getframe()
    assert audit.files == [] and audit.memory == []


def test_frames_and_gc_reached_from_the_candidate_s_code_are_recorded(audit):
    audit, _ = audit
    getframe = getattr(sys, "_get" + "frame")
    with audit.candidate():
        getframe(0)
        __import__("gc").get_objects()
        exec(compile("x = 1", "/usr/lib/python3/dist-packages/innocent.py", "exec"), {})
    assert "sys._getframe" in audit.memory and "gc.get_objects" in audit.memory
    assert any("innocent.py" in m for m in audit.memory)


def test_the_standard_library_and_torch_working_for_themselves_are_not_blamed(audit):
    audit, _ = audit
    with audit.candidate(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("fuseforge.test").warning("a candidate may log")  # logging calls sys._getframe
        warnings.warn("and warn", stacklevel=2)
        torch.nn.functional.linear(torch.rand(2, 3), torch.rand(4, 3))
        import traceback
        try:
            raise ValueError("printed, then raised again")
        except ValueError:
            traceback.format_exc()
    assert audit.memory == [] and audit.files == [] and audit.hooks == []


def test_a_hook_installed_from_the_candidate_s_code_is_recorded_even_if_removed_at_once(audit):
    audit, _ = audit
    with audit.candidate():
        sys.setprofile(lambda *a: None)
        sys.setprofile(None)
    assert audit.hooks == ["sys.setprofile"]


def test_processes_started_from_the_candidate_s_code_count_once_it_is_built(audit):
    import subprocess

    audit, _ = audit
    with audit.candidate():
        subprocess.run(["true"], check=True)  # during the build: compilers are started this way
    assert audit.processes == []
    audit.phase = "run"
    with audit.candidate():
        subprocess.run(["true"], check=True)
    assert len(audit.processes) == 1 and audit.processes[0].startswith("subprocess.Popen")


def test_the_worker_gets_no_fuseforge_variable_and_no_value_naming_the_job_s_folders(tmp_path, monkeypatch):
    jobdir = tmp_path / "work" / "candidate"
    monkeypatch.setenv("FUSEFORGE_CORPUS_RECORDS", "/somewhere/records.json")
    monkeypatch.setenv("INNOCENT", f"{tmp_path / 'work'}/x")
    env = runner.worker_env(jobdir)
    assert "FUSEFORGE_CORPUS_RECORDS" not in env and "INNOCENT" not in env
    assert env["PYTHONPATH"].startswith(runner.PACKAGE_ROOT)


def test_the_worker_runs_in_a_fresh_folder_outside_the_job_folder_removed_afterwards(tmp_path):
    jobdir = tmp_path / "job"
    jobdir.mkdir()
    (jobdir / "job.json").write_text(json.dumps({"role": "nothing"}))
    outcome = runner.run_worker("nothing", jobdir, 30)
    assert outcome.status == "exited"  # the worker refuses an unknown role
    assert not any(p.name.endswith("_cwd") for p in jobdir.iterdir())


def test_a_gate_held_by_another_grading_delays_the_run_phase_and_its_time_limit(tmp_path):
    """The build runs while the gate is held; the run phase (and its limit) starts once it is free."""
    gate = threading.Lock()
    gate.acquire()
    released = []

    def release():
        time.sleep(2.0)
        released.append(time.monotonic())
        gate.release()

    jobdir = tmp_path / "job"
    jobdir.mkdir()
    script = ("import json, sys, time; from pathlib import Path; d = Path(sys.argv[2]); "
              "e = open(d / 'candidate.events', 'a', buffering=1); "
              "e.write(json.dumps({'event': 'built'}) + '\\n'); time.sleep(0.5); "
              "(d / 'candidate.json').write_text('{}')")
    (jobdir / "fake_worker.py").write_text(script)
    original = runner.subprocess.Popen

    def popen(argv, **kw):
        return original([sys.executable, str(jobdir / "fake_worker.py"), "candidate", str(jobdir)], **kw)

    threading.Thread(target=release).start()
    runner.subprocess.Popen = popen
    try:
        outcome = runner.run_worker("candidate", jobdir, run_timeout=1.0, build_timeout=30, gate=gate)
    finally:
        runner.subprocess.Popen = original
    assert outcome.status == "finished", outcome  # 2 s waiting for the gate did not count against the 1 s
    assert outcome.build_s >= 1.5 and gate.acquire(blocking=False)  # released when the worker ended


def test_inputs_and_state_dicts_follow_from_the_secret_and_differ_from_the_seeded_ones():
    progs = harness.load_reference(MODEL)
    public = harness.draw_inputs(progs, 0)
    a, b = (harness.draw_inputs(progs, secret_seed(s, "inputs_0")) for s in (1, 2))
    assert not torch.equal(a[0], b[0]) and not torch.equal(a[0], public[0])
    assert secret_seed(7, "x") == secret_seed(7, "x") != secret_seed(7, "y")
    torch.manual_seed(0)
    seeded = progs.model_cls(*progs.init_args).state_dict()
    state = random_state(progs, 1, "state_0")
    assert set(state) == set(seeded) and all(not torch.equal(state[k], seeded[k]) for k in seeded)
    assert all(torch.equal(state[k], random_state(progs, 1, "state_0")[k]) for k in state)


def test_the_reference_draws_inputs_on_its_device_and_hands_over_cpu_copies(monkeypatch, tmp_path):
    """Catches inputs drawn by the CPU's generator on a GPU check (1.0-2.3 s a 268 MB set on an H100 machine, where
    the GPU draws it in milliseconds), and a draw that hands over the device's tensors instead of CPU copies."""
    from fuseforge.check import reference_role

    progs = harness.load_reference(MODEL)
    dev = torch.device("cpu")
    asked, drawn, original = [], [], harness.draw_inputs

    def draw(progs, seed, distribution="file", batch=None, device=None):
        asked.append((device, distribution))
        drawn.extend(original(progs, seed, distribution, batch))
        return list(drawn)

    monkeypatch.setattr(reference_role.harness, "draw_inputs", draw)
    job = {"secret": 5, "whole_budget_bytes": 2**30}
    inputs = reference_role.Reference(progs, job, dev, tmp_path).draw("inputs_0", "large")
    assert asked == [(dev, "large")]
    assert all(x.device.type == "cpu" and x is not d for x, d in zip(inputs, drawn))
    assert torch.equal(inputs[0], drawn[0])
    file_inputs = original(progs, reference_role.secret_seed(5, "inputs_0"), "file", None)
    assert torch.equal(inputs[0], file_inputs[0] * harness.LARGE)


@pytest.mark.gpu
def test_on_a_gpu_the_reference_draws_what_the_gpus_generator_draws_under_the_secret_seed(tmp_path):
    from fuseforge.check import reference_role

    progs = harness.load_reference(MODEL)
    dev = torch.device("cuda")
    (x,) = reference_role.Reference(progs, {"secret": 5, "whole_budget_bytes": 2**30}, dev, tmp_path).draw("inputs_0")
    (on_gpu,) = harness.draw_inputs(progs, secret_seed(5, "inputs_0"), device=dev)
    (on_cpu,) = harness.draw_inputs(progs, secret_seed(5, "inputs_0"))
    assert x.device.type == "cpu" and torch.equal(x, on_gpu.cpu()) and not torch.equal(x, on_cpu)


def test_the_reference_records_the_inputs_its_model_changes_in_place():
    """Catches a mutation check that compares an input with itself (the device copy it made for the call), which
    would let a candidate's in-place write of an input pass as the model's own behaviour, or flag every input."""
    import types

    from fuseforge.check.reference_role import Program

    class AddsToItsFirstInput(torch.nn.Module):
        def forward(self, x, y):
            x.add_(1)
            return x * 2 + y

    program = Program(types.SimpleNamespace(model_cls=AddsToItsFirstInput, init_args=[]), torch.device("cpu"))
    x, y = torch.randn(3), torch.randn(3)
    result = program.call([x, y])
    assert result["mutated"] == [0] and torch.equal(result["truth"][0], (2 * (x.double() + 1) + y.double()))


def test_constant_parameters_and_running_statistics_are_scattered_keeping_their_sign():
    from fuseforge.check.reference_role import random_state as draw

    class Norms(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = torch.nn.BatchNorm1d(64)

    progs = harness.Programs(MODEL, None, Norms, None, None, [], None)
    state = draw(progs, 3, "state_0")
    assert state["bn.weight"].std() > 0.1 and bool((state["bn.running_var"] > 0).all())
    assert state["bn.bias"].abs().max() > 0 and state["bn.running_mean"].abs().max() > 0
    assert int(state["bn.num_batches_tracked"]) >= 1


def test_the_grading_process_can_make_itself_non_dumpable():
    import subprocess

    probe = ("import sys; sys.path.insert(0, sys.argv[1]); "
             "from fuseforge.check.orchestrate import make_non_dumpable; "
             "ok = make_non_dumpable(); print(ok, open('/proc/self/status').read().count('x') >= 0)")
    out = subprocess.run([sys.executable, "-c", probe, runner.PACKAGE_ROOT], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.split()[0] == "True"
    assert make_non_dumpable.__doc__ and CheckSettings().pool_budget_bytes >= 2**30


def test_a_work_folder_holding_the_candidate_s_own_sources_stays_readable(tmp_path):
    source = tmp_path / "kernels.cu"
    source.write_text("// the candidate's own kernels")
    jobdir = tmp_path / "candidate"
    jobdir.mkdir()
    audit = Audit(jobdir, tmp_path / "cand.py")
    assert not audit.forbidden(source) and audit.forbidden(jobdir / "job.json")
    elsewhere = Audit(jobdir, tmp_path.parent / "cand.py")
    assert elsewhere.forbidden(source)


def test_code_the_candidate_writes_elsewhere_and_runs_from_there_is_still_the_candidate_s(audit, tmp_path):
    audit, _ = audit
    elsewhere = tmp_path / "site-packages" / "helper_lib.py"
    elsewhere.parent.mkdir()
    elsewhere.write_text("import gc\ndef look():\n    return len(gc.get_objects())\n")
    namespace = {}
    exec(compile(elsewhere.read_text(), str(elsewhere), "exec"), namespace)
    with audit.candidate():
        namespace["look"]()
    assert audit.memory == ["gc.get_objects"]
    assert not audit.is_candidate_file(logging.__file__) and not audit.is_candidate_file(torch.__file__)


def test_a_process_left_running_in_the_worker_s_session_is_found_but_torch_compile_s_workers_are_not():
    import subprocess

    from fuseforge.check.candidate_role import _processes_left

    helper = subprocess.Popen(["sleep", "7.25"])
    pool = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(7.5)", "torch._inductor.compile_worker"])
    try:
        time.sleep(0.2)
        found = _processes_left()
        assert any("sleep 7.25" in p for p in found) and not any("compile_worker" in p for p in found)
    finally:
        helper.kill()
        pool.kill()
        helper.wait()
        pool.wait()


def test_the_candidate_s_process_cannot_read_the_non_dumpable_grader_s_memory():
    """Even as root with CAP_SYS_PTRACE: the grading process is non-dumpable and the worker drops the
    capability before the candidate is imported."""
    import subprocess

    probe = """
import os, sys
sys.path.insert(0, sys.argv[1])
from fuseforge.check.confine import drop_ptrace
if sys.argv[2] == "drop":
    assert drop_ptrace()
try:
    open(f"/proc/{os.getppid()}/mem", "rb").close()
    print("read")
except OSError:
    print("denied")
"""
    parent = f"""
import subprocess, sys
sys.path.insert(0, sys.argv[1])
from fuseforge.check.orchestrate import make_non_dumpable
assert make_non_dumpable()
for how in ("keep", "drop"):
    print(subprocess.run([sys.executable, "-c", {probe!r}, sys.argv[1], how], capture_output=True, text=True,
                         check=True).stdout.strip())
"""
    out = subprocess.run([sys.executable, "-c", parent, runner.PACKAGE_ROOT], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    has_ptrace = int(open("/proc/self/status").read().split("CapEff:")[1].split()[0], 16) & (1 << 19)
    assert out == ["read" if has_ptrace else "denied", "denied"]


def test_a_worker_that_reports_untimed_gives_the_gate_back_before_it_ends(tmp_path):
    gate = threading.Lock()
    jobdir = tmp_path / "job"
    jobdir.mkdir()
    script = ("import json, sys, time; from pathlib import Path; d = Path(sys.argv[2]); "
              "e = open(d / 'candidate.events', 'a', buffering=1); "
              "e.write(json.dumps({'event': 'built'}) + '\\n'); time.sleep(0.3); "
              "e.write(json.dumps({'event': 'untimed'}) + '\\n'); time.sleep(1.5); "
              "(d / 'candidate.json').write_text('{}')")
    (jobdir / "fake_worker.py").write_text(script)
    original = runner.subprocess.Popen
    freed = []

    def popen(argv, **kw):
        return original([sys.executable, str(jobdir / "fake_worker.py"), "candidate", str(jobdir)], **kw)

    def watch():
        time.sleep(0.5)
        while not gate.acquire(blocking=False):
            time.sleep(0.02)
        freed.append(time.monotonic())
        gate.release()

    watcher = threading.Thread(target=watch)
    runner.subprocess.Popen = popen
    try:
        watcher.start()
        outcome = runner.run_worker("candidate", jobdir, run_timeout=30, build_timeout=30, gate=gate)
    finally:
        runner.subprocess.Popen = original
    watcher.join()
    ended = time.monotonic()
    assert outcome.status == "finished" and freed and ended - freed[0] > 0.8  # freed well before the end


def test_the_reference_worker_runs_its_first_case_only_once_the_gate_is_free(tmp_path):
    """Its eager timings must not overlap another grading's run phase on the same GPU: it waits for ROLE.go."""
    from fuseforge.check.orchestrate import run_reference

    gate = threading.Lock()
    gate.acquire()
    events = tmp_path / "reference" / "reference.events"

    def release():  # 1.5 s after the worker said it was built
        while not (events.exists() and '"built"' in events.read_text()):
            time.sleep(0.01)
        time.sleep(1.5)
        gate.release()

    threading.Thread(target=release).start()
    settings = CheckSettings(device="cpu", seeds=1, trials=2, warmup=1, compile=False)
    ref = run_reference(MODEL, settings, tmp_path / "reference", gate=gate)
    stages = dict(ref.meta["stages"])
    assert stages["built"] >= 1.4  # waited for the gate
    assert list(stages)[:4] == ["start", "loaded", "built", "cases"] and "reading its results" in stages
    assert gate.acquire(blocking=False)  # given back once the reference ended


def test_a_check_s_record_says_where_its_time_went_in_each_process(tmp_path):
    from fuseforge.check.orchestrate import check_files
    from fuseforge.check.report import summary

    honest = Path(__file__).parent / "adversarial" / "honest_linear_sigmoid.py"
    settings = CheckSettings(device="cpu", seeds=1, trials=2, warmup=1, compile=False)
    record = check_files(MODEL, honest, settings)
    assert record["verdict"] == "correct", record["reason"]
    stages = {who: dict(steps) for who, steps in record["stages"].items()}
    assert {"cases", "sequence", "timed calls", "baselines", "untimed"} <= set(stages["reference"])
    assert {"building", "init", "case", "sequence", "timing", "profile"} <= set(stages["candidate"])
    # the candidate's profile and probes after its timed calls run on the GPU: it never reports "untimed", which
    # gives the GPU's gate to another grading's timed calls
    assert "untimed" not in stages["candidate"]
    spent = sum(sum(steps.values()) for steps in stages.values())
    assert 0.7 * record["wall_s"] <= spent <= record["wall_s"]  # the stages account for the check's time
    assert "reference" in summary(record)[-1] and "grader" in summary(record)[-1]


def test_large_items_stay_in_unlinked_files_the_grader_holds_open_and_reach_the_candidate_unchanged(tmp_path,
                                                                                                  monkeypatch):
    """With every item 'large': the grader keeps none of them in memory, the reference's folder is gone (its files
    unlinked), and a check still grades the honest candidate correct -- each item read back whole when asked for.
    Catches a lazy item read short, at the wrong offset, or from a file already closed."""
    from fuseforge.check import orchestrate
    from fuseforge.check.orchestrate import LazyItem, check_files, run_reference

    monkeypatch.setattr(orchestrate, "LAZY_ITEM_BYTES", 0)
    settings = CheckSettings(device="cpu", seeds=1, trials=2, warmup=1, compile=False)
    ref = run_reference(MODEL, settings, tmp_path / "reference")
    assert not (tmp_path / "reference").exists()
    assert ref.feed and all(isinstance(item, LazyItem) for item in ref.feed.values())
    state = torch.load(__import__("io").BytesIO(ref.feed["state_0"]()), weights_only=True)
    assert state and all(isinstance(v, torch.Tensor) for v in state.values())
    assert ref.feed["inputs_0"]() == ref.feed["inputs_0"]()  # read again whole, from offset 0
    copied = tmp_path / "copied.pt"
    ref.feed["inputs_0"].write_to(copied)  # the hand-over's file-to-file copy
    assert copied.read_bytes() == ref.feed["inputs_0"]()
    with monkeypatch.context() as m:  # a file system without copy_file_range: through this process, whole
        m.setattr(orchestrate.os, "copy_file_range", lambda *a: (_ for _ in ()).throw(OSError("EXDEV")))
        ref.feed["inputs_0"].write_to(copied)
    assert copied.read_bytes() == ref.feed["inputs_0"]()
    honest = Path(__file__).parent / "adversarial" / "honest_linear_sigmoid.py"
    record = check_files(MODEL, honest, settings)
    assert record["verdict"] == "correct", record["reason"]
