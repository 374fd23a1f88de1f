"""The suite's progress display: one bar (done / total, building, running, failed, elapsed, ETA) and a line
per finished job. A job counts as building from the start of its build phase until its run phase starts
(waiting for a free GPU included), then as running."""

from __future__ import annotations

import threading

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from .execute import Outcome
from .jobs import Job

STYLE = {"correct": "green", "incorrect": "red", "build_failed": "red", "error": "red bold", "timeout": "red bold",
         "cpu_only": "yellow", "unavailable": "dim"}


def describe(outcome: Outcome) -> str:
    """One line: the verdict, the speedups when measured, the reason when not correct."""
    text = f"[{STYLE.get(outcome.verdict or '', 'white')}]{outcome.verdict}[/]"
    m = outcome.metrics
    if m.get("speedup_vs_eager"):
        text += f" {m['speedup_vs_eager']:.2f}x vs eager"
        if m.get("speedup_vs_compile"):
            text += f", {m['speedup_vs_compile']:.2f}x vs compile"
    if outcome.verdict != "correct" and outcome.reason:
        text += f": {outcome.reason[:300]}"
    seconds = (outcome.build_s or 0) + (outcome.run_s or 0)
    gpu = f", {outcome.gpu_s:.0f} s on the GPU" if outcome.gpu_s is not None else ""
    return text + f" ({seconds:.0f} s{gpu})"


class Tracker:
    """Counts and shows the jobs of a run; safe to call from the scheduler's threads."""

    def __init__(self, total: int, console: Console):
        self.total, self.console = total, console
        self.building = self.running = self.failed = self.done = 0
        self.phase: dict[str, str] = {}  # job key -> "build" | "run"
        self.verdicts: dict[str, str] = {}
        self.lock = threading.Lock()
        self.progress = Progress(SpinnerColumn(), TextColumn("[bold]suite"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[counts]}"), TimeElapsedColumn(), TextColumn("ETA"),
                                 TimeRemainingColumn(), console=console, transient=False)
        self.task = self.progress.add_task("suite", total=total, counts=self._counts())

    def _counts(self) -> str:
        return f"building {self.building} · running {self.running} · failed {self.failed}"

    def __enter__(self) -> Tracker:
        if self.total:
            self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def _move(self, job: Job, phase: str | None) -> None:
        old = self.phase.pop(job.key, None)
        self.building -= old == "build"
        self.running -= old == "run"
        if phase:
            self.phase[job.key] = phase
        self.building += phase == "build"
        self.running += phase == "run"

    def started(self, job: Job, phase: str) -> None:
        """The job's `phase` ("build" or "run") starts."""
        with self.lock:
            self._move(job, phase)
            self.progress.update(self.task, counts=self._counts())

    def finished(self, job: Job, outcome: Outcome) -> None:
        with self.lock:
            self._move(job, None)
            self.done += 1
            self.failed += outcome.status == "failed"
            self.verdicts[job.name] = outcome.verdict or outcome.status
            self.progress.update(self.task, completed=self.done, counts=self._counts())
            self.progress.console.print(f"{job.name}: {describe(outcome)}", highlight=False)
