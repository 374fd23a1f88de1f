"""`check_files(model, candidate, settings)`: static checks, the reference worker, the candidate worker,
the verdict. Never raises for anything a candidate or model file can do; returns the JSON record.

The reference runs first, in its own process; everything it wrote (what the grader compares against, and
the items the candidate is handed: inputs, state_dicts, fingerprint positions) is loaded into this
process's memory or opened, and its job folder, which holds the secret it drew them from, is deleted before
the candidate's process starts. What the grader compares against is one file per call, opened now and read
when it is compared (stored_outputs.py). Items larger than LAZY_ITEM_BYTES are not read then: this process opens their
files, and deleting the folder unlinks them, so their data stays reachable from this process alone (its open
files, like its memory, behind /proc/PID, which the candidate's audit watches) and is read when it is handed
over. The candidate's job folder holds only job.json (the public plan: names and shapes) and the files of the hand-over: this process writes each item when the worker asks for it
(feed.py). Before a candidate runs, this process makes itself non-dumpable (prctl), so that another
process of the same user cannot read its memory through /proc/PID/mem or ptrace. A `reference_cache`
dict lets several candidates of one model share one reference run (tests, the corpus): share it only among
candidates that trust each other -- one could keep what it was handed (inputs, positions) for the next.
The fingerprint positions each candidate is handed are picked per candidate, when it asks for them, from
the reference's larger set, with the OS's randomness. A `gate` (a lock) lets several gradings share one
GPU, one run phase at a time (runner.py).
"""

from __future__ import annotations

import ctypes
import io
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections import ChainMap
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from fuseforge.check import judge, runner
from fuseforge.check.feed import FeedServer, to_bytes
from fuseforge.check.kinds import ERROR, first_cheat, verdict_of
from fuseforge.check.reference_role import FINGERPRINT_SIZE
from fuseforge.check.static import analyse
from fuseforge.check.stored_outputs import StoredOutputs, read_all
from fuseforge.check.worker import read_json, write_json
from fuseforge.evaluate import lease
from fuseforge.evaluate.numerics import FACTOR

SCHEMA = "fuseforge.check/1"
PROBE_NAME = re.compile(r"[a-z_]{1,40}")  # a probe's name, as the worker announces it
LAZY_ITEM_BYTES = 64 * 2**20  # feed items above this stay in unlinked files this process holds open
_CACHE_LOCK = threading.Lock()
_CEILINGS: dict[str, dict] = {}  # device -> the ceilings a reference run measured there (one per process)


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
    pool_budget_bytes: int = 4 * 2**30  # timed inputs, each drawn fresh: at most this many bytes of them
    whole_budget_bytes: int = 8 * 2**30  # the reference's outputs kept whole (fp32 and fp64), beyond: sampled
    workdir: Path | None = None  # kept when given; a temporary one is removed


@dataclass
class ReferenceData:
    meta: dict
    outputs: Mapping  # what the grader compares against: call name -> entry (StoredOutputs reads it then)
    feed: dict  # item name -> serialised bytes (or a LazyItem giving them), handed to the candidate one at a time
    order: list  # the plan's order of the items


def _reference_key(model: Path, s: CheckSettings) -> tuple:
    return (str(model), model.stat().st_mtime_ns, s.device, s.seeds, s.trials, s.warmup, s.extra_batch,
            s.compile, s.max_autotune, s.pool_budget_bytes, s.whole_budget_bytes)


def run_reference(model: Path, settings: CheckSettings, jobdir: Path, gate=None,
                  progress=None) -> ReferenceData | str:
    """The reference worker; its data (in memory; its job folder is deleted), or a one-line reason why it
    failed. With a gate, its start (imports) runs freely and the rest holds the gate."""
    jobdir.mkdir(parents=True, exist_ok=True)
    job = {"role": "reference", "model": str(model), "device": settings.device, "seeds": settings.seeds,
           "trials": settings.trials, "warmup": settings.warmup, "extra_batch": settings.extra_batch,
           "compile": settings.compile, "max_autotune": settings.max_autotune,
           "pool_budget_bytes": settings.pool_budget_bytes, "whole_budget_bytes": settings.whole_budget_bytes,
           "ceilings": _CEILINGS.get(settings.device), "timing_cpus": sorted(lease.timing_cpus()),
           "secret": secrets.randbits(62)}
    write_json(jobdir / "job.json", job)
    limit = settings.reference_timeout_s
    outcome = runner.run_worker("reference", jobdir, limit, limit, gate=gate, progress=progress)
    if outcome.status != "finished":
        return f"the reference (model file) {outcome.describe({'build': limit, 'run': limit})}"
    if outcome.result.get("fatal"):
        return f"the reference run failed: {outcome.result['fatal']}"
    reading = time.perf_counter()
    private = jobdir / "private"
    meta = read_json(private / "meta.json")
    order = meta["plan"]["order"]
    feed = {name: _feed_item(private / "feed" / f"{name}.pt") for name in order}
    data = ReferenceData(meta, StoredOutputs(private / "outputs"), feed, order)
    shutil.rmtree(jobdir)
    meta["stages"] = outcome.stages() + [["reading its results", round(time.perf_counter() - reading, 3)]]
    if meta.get("ceilings"):
        _CEILINGS.setdefault(settings.device, meta["ceilings"])
    return data


class LazyItem:
    """A feed item in a file this process holds open (unlinked once the reference's folder is deleted): its bytes,
    read when it is handed over (`FeedServer` calls it)."""

    def __init__(self, path: Path):
        self.file = open(path, "rb")  # closed when the reference's data is dropped
        self.size = path.stat().st_size

    def __call__(self) -> bytes:
        return read_all(self.file, self.size)

    def close(self) -> None:
        self.file.close()

    def write_to(self, path: Path) -> None:
        """Its bytes into a new file at `path`, copied by the kernel (no copy of a large input set in this process's
        memory); by reads and a write where the file system cannot."""
        with open(path, "wb") as out:
            at, fd = 0, self.file.fileno()
            try:
                while at < self.size:
                    copied = os.copy_file_range(fd, out.fileno(), self.size - at, at)
                    if not copied:
                        break
                    at += copied
            except (AttributeError, OSError):  # no copy_file_range here: the bytes through this process
                out.seek(0)
                out.truncate()
                out.write(self())
                return
            if at != self.size:
                raise OSError(f"feed item copied short: {at} of {self.size} bytes")


def _feed_item(path: Path) -> bytes | LazyItem:
    return LazyItem(path) if path.stat().st_size > LAZY_ITEM_BYTES else path.read_bytes()


def _new_record(model: Path, candidate: Path, settings: CheckSettings) -> dict:
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(settings).items()}
    return {"schema": SCHEMA, "verdict": ERROR, "reason": None, "check": None, "model": str(model),
            "candidate": str(candidate), "device": settings.device, "settings": config, "environment": None,
            "static": None, "build": None, "run": None, "cases": [], "worst": None, "findings": [],
            "checks": [], "timing": None, "gpu": None, "stages": {}, "wall_s": None}


def _candidate_job(candidate: Path, static, settings: CheckSettings, ref: ReferenceData) -> dict:
    meta = ref.meta
    public = {"plan": {k: v for k, v in meta["plan"].items() if k != "order"}, "order": ref.order + ["plant"],
              "is_tuple": meta["is_tuple"], "init_signature": meta["init_signature"],
              "forward_signature": meta["forward_signature"]}
    return {"role": "candidate", "candidate": str(candidate), "device": settings.device, "trials": settings.trials,
            "warmup": settings.warmup, "kernel_names": static.kernel_names, "claims_kernels": static.claims_kernels,
            "timing_cpus": sorted(lease.timing_cpus()), "public": public}


def make_non_dumpable() -> bool:
    """prctl(PR_SET_DUMPABLE, 0) on Linux: processes of the same user can no longer read this one's memory
    (/proc/PID/mem, ptrace) without CAP_SYS_PTRACE. False where it is not available."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(4, 0, 0, 0, 0) == 0  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        return False


def check_files(model: str | Path, candidate: str | Path, settings: CheckSettings | None = None,
                reference_cache: dict | None = None, gate=None, progress=None) -> dict:
    """Grade CANDIDATE against MODEL; the fuseforge.check/1 record (see the package docstring). `progress(line)`:
    told of each stage the reference and candidate workers enter, as they enter it."""
    settings = settings or CheckSettings()
    model, candidate = Path(model).resolve(), Path(candidate).resolve()
    start = time.perf_counter()
    record = _new_record(model, candidate, settings)
    try:
        _check(record, model, candidate, settings, reference_cache, gate, progress)
    finally:
        record["wall_s"] = round(time.perf_counter() - start, 3)
    return record


def _check(record, model, candidate, settings, reference_cache, gate, progress=None) -> None:
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
        ref, ran = _reference(model, settings, workdir, reference_cache, gate, progress)
        if isinstance(ref, str):
            record["reason"] = ref
            return
        record["stages"]["reference"] = ref.meta["stages"] if ran else [["from the cache", 0.0]]
        record["environment"] = ref.meta.get("environment")
        jobdir = workdir / "candidate"
        if jobdir.exists():
            shutil.rmtree(jobdir)
        jobdir.mkdir()
        write_json(jobdir / "job.json", _candidate_job(candidate, static, settings, ref))
        picks: dict[str, list] = {}
        # a reference of this check alone: each item is let go once handed over (an input set's file, unlinked,
        # leaves the disk then); a cached one keeps its items for the next candidate
        owned = reference_cache is None
        items = ref.feed if owned else dict(ref.feed)
        items["plant"] = lambda: to_bytes(ref.outputs["case_0"]["eager"])  # made when handed over
        for name in ref.order:
            if name.startswith("positions_"):
                items[name] = _picker(ref.feed[name], picks, name)
        server = FeedServer(jobdir, items, ref.order + ["plant"], release=owned)
        collector = ProbeCollector(jobdir / "cand")

        def on_event(event: dict) -> None:
            if event["event"] == "need":
                server.on_need(event.get("names") or [])
            collector.on_event(event)

        make_non_dumpable()
        outcome = runner.run_worker("candidate", jobdir, settings.run_timeout_s, settings.build_timeout_s, on_event,
                                    gate=gate, progress=progress)
        record["stages"]["candidate"] = outcome.stages()
        judging = time.perf_counter()
        judge.judge(record, static, _picked(ref, picks), outcome, jobdir / "cand", settings, server.anomalies,
                    collector.taken)
        record["stages"]["grader"] = [["judging", round(time.perf_counter() - judging, 3)]]
    finally:
        if settings.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            _drop_tensors(workdir)


class ProbeCollector:
    """Takes each probe's saved outputs off the disk, into this process's memory, once the worker has moved on (its
    next event comes after the save): the judge reads them from here. Six probes of a model with 2 GB outputs were
    12 GB of the check's disk until its end. A file that cannot be read then is left for the judge."""

    def __init__(self, cand_dir: Path):
        self.dir, self.pending, self.taken = cand_dir, None, {}

    def on_event(self, event: dict) -> None:
        name = event.get("name")
        if self.pending is not None and not (event["event"] == "probe" and name == self.pending):
            self._take(f"probe_{self.pending}.pt")
            self.pending = None
        if event["event"] == "probe" and isinstance(name, str) and PROBE_NAME.fullmatch(name):
            self.pending = name

    def _take(self, file: str) -> None:
        path = self.dir / file
        try:
            self.taken[file] = torch.load(path, weights_only=True)
        except Exception:  # not written (yet): the judge reads it at the end
            return
        path.unlink(missing_ok=True)


def _drop_tensors(workdir: Path) -> None:
    """A kept workdir keeps the workers' records and logs, not their tensors: the outputs of every case were
    read into the verdict, and a suite of checks would fill a disk with them (gigabytes per model)."""
    for path in workdir.rglob("*.pt"):
        path.unlink(missing_ok=True)


def _picker(item: bytes | LazyItem, picks: dict, name: str):
    """Hands over FINGERPRINT_SIZE of the reference's positions for a timed call, picked with the OS's
    randomness when the item is asked for (once the candidate is built and the call returned)."""
    def pick() -> bytes:
        chosen = []
        data = item() if callable(item) else item
        for positions in torch.load(io.BytesIO(data), weights_only=True):
            if positions is None or positions.numel() <= FINGERPRINT_SIZE:
                chosen.append(None)
                continue
            gen = torch.Generator().manual_seed(secrets.randbits(63))
            chosen.append(torch.randperm(positions.numel(), generator=gen)[:FINGERPRINT_SIZE])
        picks[name] = chosen
        return to_bytes([p if c is None else p[c] for p, c in
                         zip(torch.load(io.BytesIO(data), weights_only=True), chosen)])
    return pick


def _picked(ref: ReferenceData, picks: dict) -> ReferenceData:
    """The reference's timed-call values at the positions handed over (the other entries as they are)."""
    picked = {}
    for name, chosen in picks.items():
        pool = "pool_" + name.removeprefix("positions_")
        picked[pool] = {key: [v if c is None else v[c] for v, c in zip(ref.outputs[pool][key], chosen)]
                        for key in ("eager", "truth")} | {"scales": ref.outputs[pool].get("scales")}
    return ReferenceData(ref.meta, ChainMap(picked, ref.outputs), ref.feed, ref.order)


def clear_reference_cache(cache: dict) -> None:
    """Forget the cached references (they live in memory only)."""
    cache.clear()


def _reference(model: Path, settings: CheckSettings, workdir: Path, cache: dict | None, gate=None, progress=None):
    """(The reference's data, whether it ran now): run now (its run phase holding the gate: it times eager), or
    from the cache, where a grading that needs a reference another one is computing waits for it."""
    def run(jobdir: Path):
        return run_reference(model, settings, jobdir, gate, progress)

    if cache is None:
        return run(workdir / "reference"), True
    key = _reference_key(model, settings)
    with _CACHE_LOCK:
        lock = cache.setdefault(("lock", *key), threading.Lock())
    with lock:
        ran = key not in cache
        if ran:
            cache[key] = run(Path(tempfile.mkdtemp(prefix="fuseforge-reference-")))
    return cache[key], ran
