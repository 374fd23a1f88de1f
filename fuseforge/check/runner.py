"""Run one worker process with time limits, and say how it ended.

The worker runs in its own session (process group) with stdout/stderr in files, its working directory a
fresh temporary folder outside the job folder (a candidate may write there; everything in the job folder
is the grader's), and an environment without fuseforge's own variables. Until it reports "built" the build
limit applies, then the run limit (the reference worker has only the run limit). With a `gate` (a lock
shared by several gradings on one GPU), the run phase waits for the gate and holds it to the end, so that
one worker's build overlaps another's run but no two run at once; the run limit starts once the gate is
held, and the file JOBDIR/ROLE.go says so to the worker (WorkerIO.wait_go). A worker that reports "untimed"
(nothing it does from then on uses the GPU: the reference writing its results) gives the gate back early.
When a limit passes, the whole process group is killed (compilers included). The outcome is one of
"finished" (it wrote ROLE.json), "timeout", "crashed" (killed by a signal: SIGSEGV, SIGABRT, SIGKILL...)
or "exited" (it ended without writing ROLE.json, e.g. a candidate calling os._exit), with the phase
("build" or "run") it was in.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
_TAIL = 4000
_COMPILER_ERROR = re.compile(r"(:|\)) ?(fatal )?error\b")  # file.cu(38): error: / file.cpp:4:5: error:
_ERROR_LINE = re.compile(r"\berror\b|\bError building extension|^FAILED:|fatal error")


@dataclass
class Outcome:
    role: str
    status: str  # "finished" | "timeout" | "crashed" | "exited"
    phase: str  # "build" | "run"
    returncode: int | None
    signal: str | None
    build_s: float | None
    run_s: float | None
    result: dict | None
    stdout: str = ""
    stderr: str = ""
    events: list[dict] = field(default_factory=list)
    error_lines: list[str] = field(default_factory=list)  # compiler-style error lines of stdout + stderr
    started: float | None = None  # wall-clock times (time.time(), as the events' "t") of the start and end
    ended: float | None = None

    def stages(self) -> list[list]:
        """Where the worker's time went: [[stage, seconds], ...], a stage lasting from its progress event to the
        next ("start": from the process's start to its first event). The feed's "need" events are not stages,
        and consecutive events of one name ("case", "probe") are one stage."""
        marks = [("start", self.started)] + [(e["event"], e["t"]) for e in self.events if e.get("event") != "need"]
        marks.append(("end", self.ended))
        out: list[list] = []
        for (name, t0), (_, t1) in zip(marks, marks[1:]):
            if t0 is None or t1 is None:
                continue
            if out and out[-1][0] == name:
                out[-1][1] += t1 - t0
            else:
                out.append([name, t1 - t0])
        return [[name, round(seconds, 3)] for name, seconds in out if name not in ("end", "done")]

    def describe(self, limits: dict) -> str:
        """One line: how the process ended, for a reason string."""
        if self.status == "timeout":
            return f"timed out after {limits[self.phase]:g} s in the {self.phase} phase (killed)"
        if self.status == "crashed":
            return f"crashed with {self.signal} in the {self.phase} phase"
        if self.status == "exited":
            return f"ended the process (exit code {self.returncode}) in the {self.phase} phase"
        return "finished"


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _read(path: Path, limit: int = 4 * 2**20) -> str:
    return path.read_bytes()[:limit].decode(errors="replace") if path.exists() else ""


def error_lines(*texts: str, limit: int = 10) -> list[str]:
    """The compiler's first error lines (nvcc, g++), then ninja's summary lines, without repeats."""
    lines: list[str] = []
    for text in texts:
        for line in text.splitlines():
            line = line.strip()
            if line and _ERROR_LINE.search(line) and line[:300] not in lines:
                lines.append(line[:300])
    compiler = [ln for ln in lines if _COMPILER_ERROR.search(ln)]
    return (compiler + [ln for ln in lines if ln not in compiler])[:limit]


def _read_events(path: Path, offset: int) -> tuple[list[dict], int]:
    if not path.exists():
        return [], offset
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    complete = data[: data.rfind(b"\n") + 1]
    events = []
    for line in complete.decode(errors="replace").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events, offset + len(complete)


def worker_env(jobdir: Path) -> dict:
    """The parent's environment without fuseforge's variables or any value naming the job's folders."""
    hidden = str(Path(jobdir).resolve().parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEFORGE_") and hidden not in v}
    env["PYTHONPATH"] = PACKAGE_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_worker(role: str, jobdir: Path, run_timeout: float, build_timeout: float | None = None,
               on_event=None, poll_s: float = 0.002, gate=None, progress=None) -> Outcome:
    """Start `python -m fuseforge.check.worker ROLE JOBDIR` and wait for it under the limits; `progress(line)` is
    told of each stage the worker enters ("reference: cases (3.2 s)": its progress events, the seconds since its
    start)."""
    cwd = Path(tempfile.mkdtemp(prefix=f"fuseforge-{role}-cwd-"))
    stdout_path, stderr_path = jobdir / f"{role}.stdout", jobdir / f"{role}.stderr"
    held = False
    try:
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            proc = subprocess.Popen([sys.executable, "-m", "fuseforge.check.worker", role, str(jobdir)],
                                    stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=cwd,
                                    env=worker_env(jobdir), start_new_session=True)
        start, started = time.monotonic(), time.time()
        phase, built_at = ("build", None) if build_timeout is not None else ("run", start)
        deadline = start + (build_timeout if build_timeout is not None else run_timeout)
        events, offset, timed_out, stage = [], 0, False, None
        while True:
            returncode = proc.poll()
            new, offset = _read_events(jobdir / f"{role}.events", offset)
            for event in new:
                events.append(event)
                if progress is not None and event["event"] not in ("need", stage):
                    stage = event["event"]
                    progress(f"{role}: {stage} ({time.monotonic() - start:.1f} s)")
                if event["event"] == "built" and phase == "build":
                    if gate is not None:
                        gate.acquire()
                        held = True
                    (jobdir / f"{role}.go").touch()  # a worker that waits for the gate may go on
                    phase, built_at = "run", time.monotonic()
                    deadline = built_at + run_timeout
                if event["event"] == "untimed" and held:  # no GPU work from here on: the next may start
                    gate.release()
                    held = False
                if on_event is not None:
                    on_event(event)
            if returncode is not None:
                break
            if time.monotonic() > deadline:
                timed_out = True
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                returncode = proc.wait()
                break
            time.sleep(poll_s)
        end, ended = time.monotonic(), time.time()
    finally:
        if held:
            gate.release()
        shutil.rmtree(cwd, ignore_errors=True)
    result_path = jobdir / f"{role}.json"
    result = json.loads(result_path.read_text()) if result_path.exists() else None
    if timed_out:
        status = "timeout"
    elif returncode < 0:
        status = "crashed"
    else:
        status = "finished" if result is not None else "exited"
    build_s = round((built_at or end) - start, 3) if build_timeout is not None else None
    run_s = round(end - built_at, 3) if built_at is not None else None
    stdout, stderr = _read(stdout_path), _read(stderr_path)
    return Outcome(role, status, phase, returncode, _signal_name(returncode) if status == "crashed" else None,
                   build_s, run_s, result, stdout[-_TAIL:], stderr[-_TAIL:], events, error_lines(stdout, stderr),
                   started, ended)
