"""The GPU lease: one process at a time does GPU work on a GPU; others do their CPU work meanwhile.

`fuseforge suite` may start the next job on a GPU while the current one still runs there: the next one's
CPU stages (capture, plans, the float64 CPU check) then overlap the current one's verification and
benchmark. What keeps them apart is this lease, taken by every process before its GPU work:

    FUSEFORGE_GPU_LEASE      a lock file, one per GPU. `acquire()` takes an exclusive flock on it and holds
                             it until `release()` or the process's end (the kernel drops a dead process's
                             lock, so a crash or a kill never leaves a GPU locked).
    FUSEFORGE_GPU_LEASE_LOG  a JSON-lines file the process appends to: {"event": "waiting" | "acquired" |
                             "released", "t" (epoch seconds), "pid", "what", "waited_s", "held_s"}. The suite
                             reads it for the job's GPU time (the seconds it held the lease) and stops the
                             run phase's clock while the job waits (`read_log`).
    FUSEFORGE_TIMING_CPUS    CPU ids (e.g. "15") that the suite keeps its other processes off; the bench's
                             timed calls run on them (`pinned`), so a neighbour's compile or float64 check
                             cannot take the core that launches the timed kernels.

Without the variables nothing happens: `acquire()` returns None and `pinned()` leaves the affinity as it
is. Any GPU work in a suite job must hold the lease (the evaluator does: `fuseforge.evaluate.cli`).
This module imports no torch.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path

LEASE_ENV = "FUSEFORGE_GPU_LEASE"
LOG_ENV = "FUSEFORGE_GPU_LEASE_LOG"
CPUS_ENV = "FUSEFORGE_TIMING_CPUS"


def _log(path: Path | None, event: str, what: str, **numbers) -> None:
    if path is None:
        return
    line = {"event": event, "t": time.time(), "pid": os.getpid(), "what": what,
            **{k: round(v, 3) for k, v in numbers.items()}}
    try:
        with Path(path).open("a") as fh:
            fh.write(json.dumps(line) + "\n")
    except OSError:  # the log is for the record; the lease itself is the lock
        pass


class Lease:
    """An exclusive hold on a GPU's lock file (module docstring)."""

    def __init__(self, lock: Path, log: Path | None, what: str):
        self.lock, self.log, self.what = Path(lock), log, what
        self._fh = None
        self.acquired_at: float | None = None
        self.waited_s = 0.0

    def acquire(self) -> Lease:
        self.lock.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.lock.open("a")
        start = time.time()
        _log(self.log, "waiting", self.what)
        fcntl.flock(self._fh, fcntl.LOCK_EX)
        self.acquired_at = time.time()
        self.waited_s = self.acquired_at - start
        _log(self.log, "acquired", self.what, waited_s=self.waited_s)
        return self

    @property
    def held(self) -> bool:
        return self._fh is not None and self.acquired_at is not None

    def release(self) -> None:
        if not self.held:
            return
        held_s = time.time() - self.acquired_at
        _log(self.log, "released", self.what, held_s=held_s)
        fcntl.flock(self._fh, fcntl.LOCK_UN)
        self._fh.close()
        self._fh, self.acquired_at = None, None

    def __enter__(self) -> Lease:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def from_env(what: str) -> Lease | None:
    """The lease the environment asks for (not yet acquired), or None."""
    lock = os.environ.get(LEASE_ENV)
    if not lock:
        return None
    log = os.environ.get(LOG_ENV)
    return Lease(Path(lock), Path(log) if log else None, what)


def timing_cpus() -> set[int]:
    """The CPU ids of FUSEFORGE_TIMING_CPUS ("15", "14,15"); empty when unset or unusable here."""
    text = os.environ.get(CPUS_ENV, "")
    try:
        cpus = {int(part) for part in text.split(",") if part.strip()}
    except ValueError:
        return set()
    return cpus if hasattr(os, "sched_setaffinity") else set()


@contextlib.contextmanager
def pinned(cpus: set[int]):
    """Run the calling thread on `cpus` inside the block (threads it starts meanwhile inherit that), then
    restore its affinity; nothing if `cpus` is empty or the system refuses."""
    if not cpus:
        yield
        return
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, cpus)
    except OSError:
        yield
        return
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def read_log(path: Path | None, now: float | None = None) -> dict:
    """What a lease log says: {held_s, waited_s (both summed, open spells counted up to `now`),
    acquisitions, waiting (is the process waiting now)}."""
    now = time.time() if now is None else now
    held = waited = 0.0
    acquisitions = 0
    waiting_since: dict[int, float] = {}
    holding_since: dict[int, float] = {}
    lines = []
    if path is not None:
        try:
            lines = Path(path).read_text().splitlines()
        except OSError:
            lines = []
    for line in lines:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        pid, t = e.get("pid"), e.get("t")
        if not isinstance(t, (int, float)):
            continue
        if e.get("event") == "waiting":
            waiting_since[pid] = t
        elif e.get("event") == "acquired":
            waited += t - waiting_since.pop(pid, t)
            holding_since[pid] = t
            acquisitions += 1
        elif e.get("event") == "released":
            held += t - holding_since.pop(pid, t)
    waited += sum(now - t for t in waiting_since.values())
    held += sum(now - t for t in holding_since.values())
    return {"held_s": round(held, 3), "waited_s": round(waited, 3), "acquisitions": acquisitions,
            "waiting": bool(waiting_since)}
