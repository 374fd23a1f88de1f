"""The GPU lease (fuseforge/evaluate/lease.py): one holder at a time, a dead holder's lock is gone, the log
says how long each process waited and held, and the timed calls can be pinned to reserved CPUs."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fuseforge.evaluate import lease
from fuseforge.evaluate.cli import prebuild

REPO = Path(__file__).resolve().parents[1]
HOLD = """
import os, sys, time
from fuseforge.evaluate import lease
held = lease.from_env(sys.argv[1])
held.acquire()
print("acquired", flush=True)
deadline = time.time() + 120
while sys.argv[2] and not os.path.exists(sys.argv[2]) and time.time() < deadline:
    time.sleep(0.05)
held.release()
"""


def _holder(tmp_path, what: str, until: Path | None, log: Path) -> subprocess.Popen:
    """A process that takes the lease and holds it until the file `until` exists."""
    env = {**os.environ, lease.LEASE_ENV: str(tmp_path / "gpu0.lock"), lease.LOG_ENV: str(log)}
    return subprocess.Popen([sys.executable, "-c", HOLD, what, str(until or "")], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, text=True)


def _wait_for(predicate, seconds=60.0):
    deadline = time.time() + seconds
    while not predicate():
        assert time.time() < deadline
        time.sleep(0.05)


def _events(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_a_second_process_waits_until_the_first_gives_the_lease_back(tmp_path):
    go = tmp_path / "go"
    first = _holder(tmp_path, "first", go, tmp_path / "first.jsonl")
    assert first.stdout.readline().strip() == "acquired"
    second = _holder(tmp_path, "second", None, tmp_path / "second.jsonl")
    _wait_for(lambda: (tmp_path / "second.jsonl").exists() and lease.read_log(tmp_path / "second.jsonl")["waiting"])
    time.sleep(0.5)
    assert second.poll() is None  # still waiting
    go.write_text("")
    assert first.wait(30) == 0 and second.wait(30) == 0
    released = next(e for e in _events(tmp_path / "first.jsonl") if e["event"] == "released")
    acquired = next(e for e in _events(tmp_path / "second.jsonl") if e["event"] == "acquired")
    assert acquired["t"] >= released["t"] and acquired["waited_s"] > 0.4
    held = lease.read_log(tmp_path / "first.jsonl")
    assert held["acquisitions"] == 1 and 0.4 < held["held_s"] < 120 and not held["waiting"]
    assert lease.read_log(tmp_path / "second.jsonl")["waited_s"] == pytest.approx(acquired["waited_s"], abs=0.01)


def test_a_holder_killed_by_a_signal_leaves_the_gpu_free(tmp_path):
    first = _holder(tmp_path, "first", tmp_path / "never", tmp_path / "first.jsonl")
    assert first.stdout.readline().strip() == "acquired"
    os.kill(first.pid, signal.SIGKILL)
    first.wait(30)
    second = _holder(tmp_path, "second", None, tmp_path / "second.jsonl")
    assert second.wait(30) == 0
    assert lease.read_log(tmp_path / "second.jsonl")["acquisitions"] == 1


def test_the_log_counts_an_open_wait_and_an_open_hold_up_to_now(tmp_path):
    log = tmp_path / "lease.jsonl"
    log.write_text("\n".join(json.dumps(e) for e in (
        {"event": "waiting", "t": 100.0, "pid": 1}, {"event": "acquired", "t": 103.0, "pid": 1},
        {"event": "released", "t": 110.0, "pid": 1}, {"event": "waiting", "t": 120.0, "pid": 2})) + "\n")
    assert lease.read_log(log, now=125.0) == {"held_s": 7.0, "waited_s": 8.0, "acquisitions": 1, "waiting": True}
    with log.open("a") as fh:
        fh.write(json.dumps({"event": "acquired", "t": 126.0, "pid": 2}) + "\n")
    assert lease.read_log(log, now=130.0) == {"held_s": 11.0, "waited_s": 9.0, "acquisitions": 2, "waiting": False}
    assert lease.read_log(tmp_path / "missing.jsonl")["held_s"] == 0


def test_without_the_environment_there_is_no_lease_and_no_pinning(monkeypatch):
    monkeypatch.delenv(lease.LEASE_ENV, raising=False)
    monkeypatch.delenv(lease.CPUS_ENV, raising=False)
    assert lease.from_env("x") is None and lease.timing_cpus() == set()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity and two CPUs")
def test_the_timed_calls_run_on_the_reserved_cpus_and_the_affinity_comes_back(monkeypatch):
    before = os.sched_getaffinity(0)
    reserved = max(before)
    monkeypatch.setenv(lease.CPUS_ENV, str(reserved))
    with lease.pinned(lease.timing_cpus()):
        assert os.sched_getaffinity(0) == {reserved}
    assert os.sched_getaffinity(0) == before


def test_prebuild_calls_the_candidates_kernels_and_leaves_failures_to_verification(tmp_path):
    marker = tmp_path / "built"
    good = tmp_path / "good.py"
    good.write_text(f"def _kernels():\n    open({str(marker)!r}, 'w').write('yes')\n")
    assert prebuild(good) >= 0 and marker.read_text() == "yes"
    bad = tmp_path / "bad.py"
    bad.write_text("def _kernels():\n    raise RuntimeError('nvcc failed')\n")
    start = time.perf_counter()
    assert prebuild(bad) >= 0 and time.perf_counter() - start < 30
    assert prebuild(tmp_path / "not_python.py") >= 0


@pytest.mark.gpu
def test_on_cuda_the_evaluator_takes_the_lease_after_building_and_gives_it_back(tmp_path, monkeypatch):
    from test_evaluate_baselines import _files

    model, cand = _files(tmp_path)
    log = tmp_path / "lease.jsonl"
    monkeypatch.setenv(lease.LEASE_ENV, str(tmp_path / "gpu.lock"))
    monkeypatch.setenv(lease.LOG_ENV, str(log))
    from fuseforge.evaluate.cli import main

    assert main([str(model), str(cand), "--out", str(tmp_path / "out"), "--device", "cuda", "--seeds", "1",
                 "--trials", "3", "--no-compile"]) == 0
    assert [e["event"] for e in _events(log)] == ["waiting", "acquired", "released"]
    record = json.loads((tmp_path / "out" / "50_verify.json").read_text())
    assert record["gpu_lease"]["prebuild_s"] is not None
