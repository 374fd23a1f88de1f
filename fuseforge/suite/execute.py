"""One phase of one job: a subprocess in its own process group, with a timeout, and what came of it.

A phase's process runs in a new session; on timeout (or when the suite stops) the whole group is killed,
so the GPU evaluation that `optimize` starts as a grandchild dies with it. Output goes to
OUT/suite_build.log and OUT/suite_run.log. Every phase also gets PYTHONUNBUFFERED=1 and its own
TORCH_EXTENSIONS_DIR (OUT/torch_extensions), so the run phase finds what its build phase compiled and two
candidates that name their extension alike never share a build folder; the build phase gets MAX_JOBS
(cores / parallel builds) for ninja, the run phase CUDA_VISIBLE_DEVICES (its GPU, or "" without GPUs).
The build phase runs at a lower CPU priority (BUILD_NICENESS): builds fill the CPU cores while GPU jobs
are timed, and a forward that launches many small kernels is bound by its own CPU thread, so compiling
at equal priority can make the timed job wait for a core (on an H100, the same ModelNew of
conv2d_avgpool_linear timed p10/p90 0.103/0.105 ms in one suite run and 0.236/0.391 ms in another, where
up to 15 builds ran next to it).

Outcome of a job (what becomes its row in the database):

    status   "built": the build phase passed, the run phase comes next (never stored)
             "done": the job reached a verdict; a later run skips it
             "failed": no verdict (crash, signal, timeout); a later run retries it (up to max_attempts)
             "unavailable": the job kind's tool does not exist yet; a later run tries again
    verdict  correct | incorrect | error | timeout | build_failed | cpu_only | unavailable | cheat:<kind>
             from OUT/50_verify.json when the run phase wrote one ("interface_mismatch" counts as
             incorrect, "invalid_python" as build_failed; a grader's "cheat:<kind>" is kept as it is);
             "build_failed" when the build phase exits with BUILD_FAILED_EXIT (the extension or
             the candidate does not compile); "cpu_only" when the run ended well without a GPU verdict
             (--no-gpu semantics); "error" when a phase crashed, was killed by a signal or exited non-zero
             without a verdict (status "failed"), or when the evaluator's own verdict is "error" (ModelNew
             raised: status "done"); "timeout" when a phase ran out of time.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .build import BUILD_FAILED_EXIT, ROOFLINE_FILE
from .environment import job_environment
from .jobs import Job

VERIFY_FILE, BENCH_FILE, CHECK_FILE = "50_verify.json", "60_bench.json", "check.json"
VERDICTS = {"correct": "correct", "incorrect": "incorrect", "interface_mismatch": "incorrect",
            "build_failed": "build_failed", "invalid_python": "build_failed", "error": "error", "timeout": "timeout"}

BUILD_NICENESS = 10  # added to the suite's own niceness for the build phase's processes

_live: set[subprocess.Popen] = set()
_live_lock = threading.Lock()


@dataclass
class Outcome:
    status: str
    verdict: str | None
    reason: str | None = None
    phase: str = "build"
    exit_code: int | None = None
    build_s: float | None = None
    run_s: float | None = None
    worker: str | None = None
    environment: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)  # the numeric columns of a jobs row
    verify: dict | None = None
    bench: dict | None = None
    roofline: dict | None = None  # suite_roofline.json of the build phase


@dataclass
class Finished:
    returncode: int
    timed_out: bool
    seconds: float
    log: Path


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_live() -> None:
    """Kill every phase process (and its group) this process has running: the suite is stopping."""
    with _live_lock:
        for proc in list(_live):
            _kill_group(proc)


def run_process(argv: list[str], env: dict[str, str], timeout_s: float, log: Path, niceness: int = 0) -> Finished:
    """Run ARGV to its end or TIMEOUT_S; `niceness` lowers its CPU priority (and its children's) by that much."""
    start = time.monotonic()
    with log.open("wb") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **env}, start_new_session=True)
        if niceness:
            _lower_priority(proc.pid, niceness)
        with _live_lock:
            _live.add(proc)
        try:
            proc.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(proc)  # on timeout the job; otherwise whatever it left running in its group
            proc.wait()
            with _live_lock:
                _live.discard(proc)
    return Finished(proc.returncode, timed_out, time.monotonic() - start, log)


def _lower_priority(pid: int, niceness: int) -> None:
    """Set PID's niceness to ours + NICENESS; its children started later inherit it."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, min(19, os.getpriority(os.PRIO_PROCESS, 0) + niceness))
    except OSError:  # it has already exited: nothing to lower
        pass


def tail_reason(log: Path) -> str | None:
    """The most telling line of a log: the last one naming fuseforge or an error, else the last one."""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()] if log.exists() else []
    telling = [ln for ln in lines if "fuseforge:" in ln or "Error" in ln or "error" in ln]
    pick = (telling or lines or [None])[-1]
    return pick[-300:] if pick else None


def _crash_reason(phase: str, done: Finished, timeout_s: float) -> tuple[str, str]:
    if done.timed_out:
        return "timeout", f"{phase} phase timed out after {timeout_s:g} s"
    if done.returncode < 0:
        return "error", f"{phase} phase killed by {signal.Signals(-done.returncode).name}"
    return "error", f"{phase} phase exited {done.returncode}: {tail_reason(done.log)}"


def prepare(job: Job) -> None:
    """A fresh output folder: nothing of an earlier attempt may be read as this attempt's result."""
    shutil.rmtree(job.out_dir, ignore_errors=True)
    job.out_dir.mkdir(parents=True)


def _base_env(job: Job) -> dict[str, str]:
    return {"PYTHONUNBUFFERED": "1", "TORCH_EXTENSIONS_DIR": str(job.out_dir / "torch_extensions")}


def build_phase(job: Job, timeout_s: float, parallel_builds: int = 1) -> Outcome:
    """Prebuild on the CPU; status "built" when the run phase may follow."""
    prepare(job)
    env = {**_base_env(job), "MAX_JOBS": str(max(1, (os.cpu_count() or 1) // max(1, parallel_builds)))}
    done = run_process(job.argv(job.build_template), env, timeout_s, job.out_dir / "suite_build.log",
                       niceness=BUILD_NICENESS)
    outcome = Outcome("built", None, phase="build", exit_code=done.returncode, build_s=round(done.seconds, 3),
                      worker="cpu")
    if done.returncode == BUILD_FAILED_EXIT and not done.timed_out:
        outcome.status, outcome.verdict = "done", "build_failed"
        outcome.reason = f"build failed: {tail_reason(done.log) or '(no output)'}"
    elif done.timed_out or done.returncode != 0:
        outcome.status = "failed"
        outcome.verdict, outcome.reason = _crash_reason("build", done, timeout_s)
    outcome.roofline = _read(job.out_dir / ROOFLINE_FILE)
    outcome.metrics = metrics(None, None, outcome.roofline)
    return outcome


def run_phase(job: Job, gpu_id: str | None, timeout_s: float, no_compile: bool = False,
              built: Outcome | None = None, max_autotune: bool = False) -> Outcome:
    """Run the job (on GPU `gpu_id`, or with --no-gpu semantics when it is None); `no_compile`: the compile
    baseline is cached; `max_autotune`: time the max-autotune baseline in this run."""
    if built is None:
        prepare(job)
    env = {**_base_env(job), "CUDA_VISIBLE_DEVICES": gpu_id if gpu_id is not None else ""}
    argv = job.argv(job.run_template, no_gpu=gpu_id is None, no_compile=no_compile,
                    max_autotune=max_autotune and gpu_id is not None)
    environment = job_environment(gpu_id)
    done = run_process(argv, env, timeout_s, job.out_dir / "suite_run.log")
    outcome = collect(job.out_dir)
    measured = outcome.environment
    environment.update(measured=measured or None, gpu=environment["gpu"] or measured.get("gpu"),
                       torch=measured.get("torch") or environment["torch"])
    outcome.environment, outcome.phase, outcome.exit_code = environment, "run", done.returncode
    outcome.run_s, outcome.build_s = round(done.seconds, 3), built.build_s if built else None
    verify = outcome.verify
    if done.timed_out or done.returncode < 0:
        outcome.status = "failed"
        outcome.verdict, outcome.reason = _crash_reason("run", done, timeout_s)
    elif verify is not None:
        verdict = str(verify.get("verdict"))
        outcome.verdict = verdict if verdict.startswith("cheat:") else VERDICTS.get(verdict, "error")
        outcome.reason = verify.get("reason")
    elif done.returncode == 0:
        outcome.verdict = "cpu_only"
        outcome.reason = "CPU-side checks passed; GPU stages not run" + ("" if gpu_id is None else
                                                                         " (the job saw no GPU)")
    else:
        outcome.status = "failed"
        outcome.verdict, outcome.reason = _crash_reason("run", done, timeout_s)
    return outcome


def collect(out_dir: Path) -> Outcome:
    """A "done" outcome with what the job wrote: 50_verify.json (without its cases), 60_bench.json,
    suite_roofline.json, their metrics, and the environment the evaluator measured (no verdict yet)."""
    verify, bench, roofline = (_read(out_dir / f) for f in (VERIFY_FILE, BENCH_FILE, ROOFLINE_FILE))
    check = _read(out_dir / CHECK_FILE)
    if check is not None:
        verify, bench = from_check_record(check)
    measured = (verify or {}).get("environment") or (bench or {}).get("environment") or {}
    return Outcome("done", None, phase="run", environment=measured, metrics=metrics(verify, bench, roofline),
                   verify={k: v for k, v in verify.items() if k != "cases"} if verify else None, bench=bench,
                   roofline=roofline)


def from_check_record(record: dict) -> tuple[dict, dict]:
    """A `fuseforge check` record (schema fuseforge.check/1) as the evaluator's verify and bench records."""
    verify = {k: record.get(k) for k in ("verdict", "reason", "check", "worst", "environment")}
    timing = record.get("timing") or {}
    variants = {name: ({"status": "ok", **v} if "median_ms" in v else v)
                for name, v in timing.items()
                if name in ("candidate", "eager", "compile", "compile_max_autotune") and isinstance(v, dict)}
    bench = {"variants": variants, "speedup": timing.get("speedup") or {}, "environment": record.get("environment")}
    return verify, bench


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def number(value) -> float | None:
    """A finite float, or None (the evaluator writes non-finite floats as strings such as "nan")."""
    try:
        x = float(value) if isinstance(value, (int, float, str)) and not isinstance(value, bool) else None
    except ValueError:
        return None
    return x if x is not None and math.isfinite(x) else None


def metrics(verify: dict | None, bench: dict | None, roofline: dict | None) -> dict:
    """The numeric columns of a jobs row, from 50_verify.json, 60_bench.json and suite_roofline.json."""
    worst = (verify or {}).get("worst") or {}
    variants = (bench or {}).get("variants") or {}
    ok = {name: v for name, v in variants.items() if isinstance(v, dict) and v.get("status") == "ok"}
    ms = {name: number(v.get("median_ms")) for name, v in ok.items()}
    peak = {name: v.get("peak_bytes") for name, v in ok.items()}
    ours, eager, comp = ms.get("candidate"), ms.get("eager"), ms.get("compile")
    speedup = (bench or {}).get("speedup") or {}
    allclose = (verify or {}).get("allclose")
    return {
        "cand_rel_err": number(worst.get("cand_rel_err")), "eager_rel_err": number(worst.get("ref_rel_err")),
        "allclose": None if allclose is None else int(bool(allclose)),
        "ours_ms": ours, "eager_ms": eager, "compile_ms": comp,
        "ours_peak_bytes": peak.get("candidate"), "eager_peak_bytes": peak.get("eager"),
        "compile_peak_bytes": peak.get("compile"),
        "speedup_vs_eager": number(speedup.get("vs_eager")) or (eager / ours if eager and ours else None),
        "speedup_vs_compile": number(speedup.get("vs_compile")) or (comp / ours if comp and ours else None),
        "flops": number((roofline or {}).get("flops")), "min_bytes": number((roofline or {}).get("min_bytes")),
        "floor_ms": number((roofline or {}).get("floor_ms")),
    }
