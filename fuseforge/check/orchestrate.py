"""`check_files(model, candidate, settings)`: static checks, the reference worker, the candidate worker,
the verdict. Never raises for anything a candidate or model file can do; returns the JSON record.

The reference runs first, in its own process; its private results (eager and fp64 outputs) are loaded
here and deleted from disk before the candidate's process starts, which gets only `public/` (inputs,
weights). A `reference_cache` dict lets several candidates of one model share one reference run (tests
and batch grading): the reference's private results then stay in this process's memory only.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from fuseforge.check import judge, runner
from fuseforge.check.kinds import ERROR, first_cheat, verdict_of
from fuseforge.check.static import analyse
from fuseforge.check.worker import read_json, write_json
from fuseforge.evaluate.numerics import FACTOR

SCHEMA = "fuseforge.check/1"


@dataclass
class CheckSettings:
    device: str = field(default_factory=lambda: "cuda" if torch.cuda.is_available() else "cpu")
    seeds: int = 3
    trials: int = 50
    warmup: int = 5
    tolerance_factor: float = FACTOR
    extra_batch: int | None = None  # None: automatic (b // 2 + 1); 0: off
    build_timeout_s: float = 900.0
    run_timeout_s: float = 600.0
    reference_timeout_s: float = 900.0
    compile: bool = True
    max_autotune: bool = False  # also time torch.compile(mode="max-autotune"): minutes of autotuning per model
    pool_budget_bytes: int = 512 * 2**20
    workdir: Path | None = None  # kept when given; a temporary one is removed


@dataclass
class ReferenceData:
    meta: dict
    outputs: dict
    public: Path


def _reference_key(model: Path, s: CheckSettings) -> tuple:
    return (str(model), model.stat().st_mtime_ns, s.device, s.seeds, s.trials, s.warmup, s.extra_batch,
            s.compile, s.max_autotune, s.pool_budget_bytes)


def run_reference(model: Path, settings: CheckSettings, jobdir: Path) -> ReferenceData | str:
    """The reference worker; its data, or a one-line reason why it failed."""
    jobdir.mkdir(parents=True, exist_ok=True)
    job = {"role": "reference", "model": str(model), "device": settings.device, "seeds": settings.seeds,
           "trials": settings.trials, "warmup": settings.warmup, "extra_batch": settings.extra_batch,
           "compile": settings.compile, "max_autotune": settings.max_autotune,
           "pool_budget_bytes": settings.pool_budget_bytes,
           "secret": secrets.randbits(62)}
    write_json(jobdir / "job.json", job)
    outcome = runner.run_worker("reference", jobdir, settings.reference_timeout_s)
    if outcome.status != "finished":
        return f"the reference (model file) {outcome.describe({'run': settings.reference_timeout_s})}"
    if outcome.result.get("fatal"):
        return f"the reference run failed: {outcome.result['fatal']}"
    private = jobdir / "private"
    data = ReferenceData(read_json(private / "meta.json"),
                         torch.load(private / "outputs.pt", weights_only=True), jobdir / "public")
    shutil.rmtree(private)
    return data


def _new_record(model: Path, candidate: Path, settings: CheckSettings) -> dict:
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(settings).items()}
    return {"schema": SCHEMA, "verdict": ERROR, "reason": None, "check": None, "model": str(model),
            "candidate": str(candidate), "device": settings.device, "settings": config, "environment": None,
            "static": None, "build": None, "run": None, "cases": [], "worst": None, "findings": [],
            "checks": [], "timing": None, "gpu": None, "wall_s": None}


def _candidate_job(candidate: Path, static, settings: CheckSettings) -> dict:
    return {"role": "candidate", "candidate": str(candidate), "device": settings.device, "trials": settings.trials,
            "warmup": settings.warmup, "kernel_names": static.kernel_names}


def check_files(model: str | Path, candidate: str | Path, settings: CheckSettings | None = None,
                reference_cache: dict | None = None) -> dict:
    """Grade CANDIDATE against MODEL; the fuseforge.check/1 record (see the package docstring)."""
    settings = settings or CheckSettings()
    model, candidate = Path(model).resolve(), Path(candidate).resolve()
    start = time.perf_counter()
    record = _new_record(model, candidate, settings)
    try:
        _check(record, model, candidate, settings, reference_cache)
    finally:
        record["wall_s"] = round(time.perf_counter() - start, 3)
    return record


def _check(record, model, candidate, settings, reference_cache) -> None:
    if not candidate.is_file() or not model.is_file():
        record["reason"] = f"no such file: {model if not model.is_file() else candidate}"
        return
    static = analyse(candidate.read_text(errors="replace"), candidate.name, model.stem, candidate.parent)
    record["static"] = static.to_json()
    if static.syntax_error:
        record.update(verdict="invalid_python", reason=static.syntax_error, check="syntax")
        return
    cheat = first_cheat(static.findings)
    if cheat:
        record["findings"] = [f.to_json() for f in static.findings]
        record["checks"] = judge.checks_table(set(), static.findings)
        where = f" (line {cheat.line})" if cheat.line else ""
        record.update(verdict=verdict_of(cheat.kind), reason=f"{cheat.check}: {cheat.message}{where}",
                      check=cheat.check, run={"status": "skipped", "reason": "decided by a static check"})
        return
    workdir = Path(settings.workdir or tempfile.mkdtemp(prefix="fuseforge-check-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        ref = _reference(model, settings, workdir, reference_cache)
        if isinstance(ref, str):
            record["reason"] = ref
            return
        record["environment"] = ref.meta.get("environment")
        jobdir = workdir / "candidate"
        if jobdir.exists():
            shutil.rmtree(jobdir)
        jobdir.mkdir()
        (jobdir / "public").symlink_to(ref.public, target_is_directory=True)
        write_json(jobdir / "job.json", _candidate_job(candidate, static, settings))

        def on_event(event: dict) -> None:
            if event["event"] == "plant_ready":  # eager's case-0 outputs, written only now (see candidate_role)
                torch.save(ref.outputs["case_0"]["eager"], jobdir / "plant.tmp")
                (jobdir / "plant.tmp").rename(jobdir / "plant.pt")

        outcome = runner.run_worker("candidate", jobdir, settings.run_timeout_s, settings.build_timeout_s, on_event)
        judge.judge(record, static, ref, outcome, jobdir / "cand", settings)
    finally:
        if settings.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


def clear_reference_cache(cache: dict) -> None:
    """Remove the cached references' input folders."""
    for data in cache.values():
        if isinstance(data, ReferenceData):
            shutil.rmtree(data.public.parent, ignore_errors=True)
    cache.clear()


def _reference(model: Path, settings: CheckSettings, workdir: Path, cache: dict | None):
    if cache is None:
        return run_reference(model, settings, workdir / "reference")
    key = _reference_key(model, settings)
    if key not in cache:
        cache[key] = run_reference(model, settings, Path(tempfile.mkdtemp(prefix="fuseforge-reference-")))
    return cache[key]
