"""What the suite's workers share while a run goes on: a planned job, the run's context (its database row,
progress, the stop flag, the CPUs kept for timed calls) and `guarded`, which turns a bug of the suite in one
phase into that job's failure. The local scheduler and the Ray backend both run jobs through these."""

from __future__ import annotations

import threading
import traceback
from dataclasses import dataclass, field

from .db import Store
from .execute import Outcome
from .jobs import Job, SuiteConfig
from .progress import Tracker


@dataclass
class Planned:
    job: Job
    attempt: int
    row: int | None = None  # the jobs row, once the job started


@dataclass
class Context:
    config: SuiteConfig
    store: Store
    run_id: int
    tracker: Tracker
    stop: threading.Event = field(default_factory=threading.Event)
    timing_cpus: dict[int, int] = field(default_factory=dict)  # GPU index -> the CPU kept for its timed calls
    background: set[int] | None = None  # the CPUs of every phase process (None: all)
    threads: int | None = None  # each GPU run phase's share of them (OMP_NUM_THREADS)

    def start(self, p: Planned, worker: str, phase: str) -> None:
        if p.row is None:
            p.row = self.store.start_job(self.run_id, p.job, p.attempt, worker)
        self.tracker.started(p.job, phase)

    def finish(self, p: Planned, outcome: Outcome) -> None:
        self.store.finish_job(p.row, p.job, outcome)
        self.tracker.finished(p.job, outcome)


def guarded(phase, *args) -> Outcome:
    try:
        return phase(*args)
    except Exception as exc:  # a bug of the suite must cost one job, not the run
        traceback.print_exc()
        return Outcome("failed", "error", reason=f"suite error: {type(exc).__name__}: {exc}")
