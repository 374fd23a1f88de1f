"""One phase of one job: a subprocess in its own process group, with a timeout, and what came of it.

A phase's process runs in a new session; on timeout (or when the suite stops) the whole group is killed,
so the GPU evaluation that `optimize` starts as a grandchild dies with it. Output goes to
OUT.suite/suite_build.log and OUT.suite/suite_run.log, beside the job's folder OUT and never inside it
(`optimize` moves every artefact of a plan it leaves into OUT/attempts/, and a log moved away while its
phase runs used to leave the job with no reason at all). Every phase also gets PYTHONUNBUFFERED=1,
COLUMNS=1000 (so a one-line error printed through rich is not wrapped into pieces) and its own
TORCH_EXTENSIONS_DIR (OUT.suite/torch_extensions), so the run phase finds what its build phase compiled and
two candidates that name their extension alike never share a build folder; the build phase gets MAX_JOBS
(cores / parallel builds) for ninja, the run phase CUDA_VISIBLE_DEVICES (its GPU, or "" without GPUs),
FUSEFORGE_BASELINES (OUT.suite/baselines.json: the baselines of this model the database holds, which the
evaluator uses instead of timing them again and adds to) and, when the scheduler gives one, the GPU lease
(FUSEFORGE_GPU_LEASE, FUSEFORGE_GPU_LEASE_LOG = OUT.suite/gpu_lease.jsonl, FUSEFORGE_TIMING_CPUS: see
fuseforge/evaluate/lease.py), and its share of the CPUs as OMP_NUM_THREADS (torch's threads: with 8 run phases of
64 threads each on 64 cores, the grader's float64 comparisons of 0.5 GB outputs took 200 s a check, 3-11 s alone).
A run phase's timeout does not count the seconds it waits for the lease (up
to the timeout itself), and its GPU time (`gpu_s`) is the seconds it held it (the whole run phase when its
command takes no lease).
Processes may be confined to a set of CPUs (`affinity`: the scheduler keeps one per GPU for timed calls).
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
    reason   one line: what failed and where. A phase that ends without a verdict is described by
             `failure_reason`: the line `fuseforge: MODEL: STAGE: message` that `optimize` and the build
             phase print on failure (as "STAGE: message"), else the failed run's report.md ("stage X
             failed: ..."), else the last line of its log that names an error.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fuseforge.evaluate import baselines, lease

from .build import BUILD_FAILED_EXIT, ROOFLINE_FILE
from .environment import job_environment
from .jobs import Job

VERIFY_FILE, BENCH_FILE, CHECK_FILE = "50_verify.json", "60_bench.json", "check.json"
VERDICTS = {"correct": "correct", "incorrect": "incorrect", "interface_mismatch": "incorrect",
            "build_failed": "build_failed", "invalid_python": "build_failed", "error": "error", "timeout": "timeout"}

BUILD_NICENESS = 10  # added to the suite's own niceness for the build phase's processes
REASON_MAX = 600  # characters of a reason kept in the database
BUILD_LOG, RUN_LOG, LEASE_LOG, BASELINES_FILE = "suite_build.log", "suite_run.log", "gpu_lease.jsonl", "baselines.json"
FAILURE_LINE = re.compile(r"^fuseforge: (?P<model>[^:]+\.py): (?P<message>\S.*)$")
REPORT_FAILURE = re.compile(r"^- stage (?P<stage>\w+) failed: (?P<message>.*)$")
PYTHON_ERROR = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b:?.*")

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
    gpu_s: float | None = None  # seconds the job held its GPU (the GPU lease, else its whole run phase)
    lease_wait_s: float | None = None  # seconds the run phase waited for the GPU lease
    new_baselines: list = field(default_factory=list)  # baseline cache entries measured by this run phase


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


def run_process(argv: list[str], env: dict[str, str], timeout_s: float, log: Path, niceness: int = 0,
                affinity: set[int] | None = None, paused: Callable[[], float] | None = None) -> Finished:
    """Run ARGV to its end or TIMEOUT_S; `niceness` lowers its CPU priority (and its children's) by that much,
    `affinity` confines it (and them) to those CPUs, and the seconds `paused()` returns (the time it waited
    for the GPU lease) do not count toward the timeout."""
    start = time.monotonic()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **env}, start_new_session=True)
        if niceness:
            _lower_priority(proc.pid, niceness)
        if affinity:
            _confine(proc.pid, affinity)
        with _live_lock:
            _live.add(proc)
        try:
            timed_out = _wait(proc, start, timeout_s, paused)
        finally:
            _kill_group(proc)  # on timeout the job; otherwise whatever it left running in its group
            proc.wait()
            with _live_lock:
                _live.discard(proc)
    return Finished(proc.returncode, timed_out, time.monotonic() - start, log)


def _wait(proc: subprocess.Popen, start: float, timeout_s: float, paused: Callable[[], float] | None) -> bool:
    """Wait for PROC; True if it ran out of time (not counting the seconds `paused()` says it waited)."""
    if paused is None:
        try:
            proc.wait(timeout=timeout_s)
            return False
        except subprocess.TimeoutExpired:
            return True
    while True:
        active = time.monotonic() - start - paused()
        if active >= timeout_s:
            return proc.poll() is None
        try:
            proc.wait(timeout=min(0.5, timeout_s - active))
            return False
        except subprocess.TimeoutExpired:
            continue


def _confine(pid: int, cpus: set[int]) -> None:
    """Run PID (and what it starts later) on CPUS only."""
    try:
        os.sched_setaffinity(pid, cpus)
    except (OSError, AttributeError):  # it has already exited, or no affinity here: nothing to confine
        pass


def _lower_priority(pid: int, niceness: int) -> None:
    """Set PID's niceness to ours + NICENESS; its children started later inherit it."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, min(19, os.getpriority(os.PRIO_PROCESS, 0) + niceness))
    except OSError:  # it has already exited: nothing to lower
        pass


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 3] + "..."


def _log_lines(log: Path | None) -> list[str]:
    if log is None or not log.exists():
        return []
    return [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]


def tail_reason(log: Path | None) -> str | None:
    """The most telling line of a log: the last one naming fuseforge or an error, else the last one."""
    lines = _log_lines(log)
    telling = [ln for ln in lines if "fuseforge:" in ln or "Error" in ln or "error" in ln]
    pick = (telling or lines or [None])[-1]
    return _one_line(pick) if pick else None


def _report_reason(out_dir: Path | None) -> str | None:
    """ "STAGE: message" of the last stage a failed run's report.md says failed."""
    report = out_dir / "report.md" if out_dir is not None else None
    if report is None or not report.exists():
        return None
    found = [m for ln in report.read_text(errors="replace").splitlines() if (m := REPORT_FAILURE.match(ln.strip()))]
    return f"{found[-1]['stage']}: {found[-1]['message']}" if found else None


def failure_reason(log: Path | None, out_dir: Path | None = None) -> str | None:
    """One line saying what failed and where, for a phase that ended without a verdict (module docstring)."""
    lines = _log_lines(log)
    stated = [m["message"] for ln in lines if (m := FAILURE_LINE.match(ln))]
    if stated:
        return _one_line(stated[-1])
    reported = _report_reason(out_dir)
    if reported:
        return _one_line(reported)
    errors = [ln for ln in lines if PYTHON_ERROR.match(ln)]
    if errors:
        return _one_line(errors[-1])
    return tail_reason(log)


def _crash_reason(phase: str, done: Finished, timeout_s: float, out_dir: Path | None = None) -> tuple[str, str]:
    if done.timed_out:
        return "timeout", f"{phase} phase timed out after {timeout_s:g} s"
    if done.returncode < 0:
        return "error", f"{phase} phase killed by {signal.Signals(-done.returncode).name}"
    return "error", f"{phase} phase exited {done.returncode}: {failure_reason(done.log, out_dir) or '(no output)'}"


def prepare(job: Job) -> None:
    """A fresh output folder: nothing of an earlier attempt may be read as this attempt's result."""
    for folder in (job.out_dir, job.suite_dir):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)


def _base_env(job: Job) -> dict[str, str]:
    return {"PYTHONUNBUFFERED": "1", "COLUMNS": "1000",
            "TORCH_EXTENSIONS_DIR": str(job.suite_dir / "torch_extensions")}


def build_phase(job: Job, timeout_s: float, parallel_builds: int = 1, affinity: set[int] | None = None) -> Outcome:
    """Prebuild on the CPU; status "built" when the run phase may follow."""
    prepare(job)
    env = {**_base_env(job), "MAX_JOBS": str(max(1, (os.cpu_count() or 1) // max(1, parallel_builds)))}
    done = run_process(job.argv(job.build_template), env, timeout_s, job.suite_dir / BUILD_LOG,
                       niceness=BUILD_NICENESS, affinity=affinity)
    outcome = Outcome("built", None, phase="build", exit_code=done.returncode, build_s=round(done.seconds, 3),
                      worker="cpu")
    if done.returncode == BUILD_FAILED_EXIT and not done.timed_out:
        outcome.status, outcome.verdict = "done", "build_failed"
        outcome.reason = failure_reason(done.log, job.out_dir) or "build: failed (no output)"
    elif done.timed_out or done.returncode != 0:
        outcome.status = "failed"
        outcome.verdict, outcome.reason = _crash_reason("build", done, timeout_s, job.out_dir)
    outcome.roofline = _read(job.out_dir / ROOFLINE_FILE)
    outcome.metrics = metrics(None, None, outcome.roofline)
    return outcome


@dataclass
class GpuShare:
    """How a run phase shares its GPU and the CPUs (from the scheduler): the GPU's lease file, the CPUs kept
    for its timed calls, and the CPUs for everything else."""

    lease_file: Path | None = None
    timing_cpus: set[int] | None = None
    affinity: set[int] | None = None
    threads: int | None = None  # its share of the CPUs: OMP_NUM_THREADS (run phases in flight share them)


def run_phase(job: Job, gpu_id: str | None, timeout_s: float, no_compile: bool = False,
              built: Outcome | None = None, max_autotune: bool = False, share: GpuShare | None = None,
              cached_baselines: list[dict] | None = None) -> Outcome:
    """Run the job (on GPU `gpu_id`, or with --no-gpu semantics when it is None); `no_compile`: the compile
    baseline is cached; `max_autotune`: time the max-autotune baseline in this run; `share`: the GPU lease
    and CPUs; `cached_baselines`: baseline cache entries of this model (written to OUT.suite/baselines.json)."""
    if built is None:
        prepare(job)
    share = share or GpuShare()
    cache_file, lease_log = job.suite_dir / BASELINES_FILE, job.suite_dir / LEASE_LOG
    baselines.write(cache_file, list(cached_baselines or []))
    env = {**_base_env(job), "CUDA_VISIBLE_DEVICES": gpu_id if gpu_id is not None else "",
           baselines.ENV: str(cache_file)}
    if share.threads:
        env["OMP_NUM_THREADS"] = str(share.threads)
    paused = None
    if gpu_id is not None and share.lease_file is not None:
        env.update({lease.LEASE_ENV: str(share.lease_file), lease.LOG_ENV: str(lease_log)})
        if share.timing_cpus:
            env[lease.CPUS_ENV] = ",".join(str(c) for c in sorted(share.timing_cpus))
        # waiting for the lease stops the clock, for at most the timeout itself: a lease held by a process
        # the suite does not control cannot keep a job waiting forever
        paused = lambda: min(lease.read_log(lease_log)["waited_s"], timeout_s)  # noqa: E731
    argv = job.argv(job.run_template, no_gpu=gpu_id is None, no_compile=no_compile,
                    max_autotune=max_autotune and gpu_id is not None)
    environment = job_environment(gpu_id)
    done = run_process(argv, env, timeout_s, job.suite_dir / RUN_LOG, affinity=share.affinity, paused=paused)
    outcome = collect(job.out_dir)
    if outcome.roofline is None and built is not None:  # a plan the run phase left took OUT's copy along
        outcome.roofline = built.roofline
        outcome.metrics.update({k: v for k, v in metrics(None, None, built.roofline).items()
                                if k in ("flops", "min_bytes", "floor_ms")})
    measured = outcome.environment
    environment.update(measured=measured or None, gpu=environment["gpu"] or measured.get("gpu"),
                       torch=measured.get("torch") or environment["torch"])
    outcome.environment, outcome.phase, outcome.exit_code = environment, "run", done.returncode
    outcome.run_s, outcome.build_s = round(done.seconds, 3), built.build_s if built else None
    held = lease.read_log(lease_log)
    if held["acquisitions"]:
        outcome.gpu_s, outcome.lease_wait_s = held["held_s"], held["waited_s"]
    elif gpu_id is not None:
        outcome.gpu_s = outcome.run_s
    given = {_entry_id(e) for e in cached_baselines or []}
    outcome.new_baselines = [e for e in baselines.read(cache_file) if _entry_id(e) not in given]
    verify = outcome.verify
    if done.timed_out or done.returncode < 0:
        outcome.status = "failed"
        outcome.verdict, outcome.reason = _crash_reason("run", done, timeout_s, job.out_dir)
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
        outcome.verdict, outcome.reason = _crash_reason("run", done, timeout_s, job.out_dir)
    return outcome


def _entry_id(entry: dict) -> str:
    """What makes a baseline cache entry this one measurement (to tell the entries a phase added)."""
    return json.dumps({k: entry.get(k) for k in ("model_hash", "gpu", "torch", "settings", "variant", "measured",
                                                  "median_ms")}, sort_keys=True, default=str)


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
        "eager_cached": int(bool(ok.get("eager", {}).get("cached"))),
        "compile_cached": int(bool(ok.get("compile", {}).get("cached"))),
        "ours_peak_bytes": peak.get("candidate"), "eager_peak_bytes": peak.get("eager"),
        "compile_peak_bytes": peak.get("compile"),
        "speedup_vs_eager": number(speedup.get("vs_eager")) or (eager / ours if eager and ours else None),
        "speedup_vs_compile": number(speedup.get("vs_compile")) or (comp / ours if comp and ours else None),
        "flops": number((roofline or {}).get("flops")), "min_bytes": number((roofline or {}).get("min_bytes")),
        "floor_ms": number((roofline or {}).get("floor_ms")),
    }
