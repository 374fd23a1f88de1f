"""Cached timings of the reference variants (eager, torch.compile, max-autotune): one per key.

A baseline is the timing of a variant that does not depend on the candidate, so it can be measured once
and reused by every later benchmark of the same work. Its key:

    model_hash  sha256 of the model file's bytes, first 16 hex digits (the suite's `jobs.file_hash`)
    gpu         the device name torch reports (torch.cuda.get_device_name; "cpu" on the CPU)
    torch       torch.__version__
    settings    the bench settings that shape a timing: trials, warmup, seed, input distribution, L2 flush
                bytes, timer, and the precision flags eager runs under (float32 matmul precision, cuDNN TF32)
    variant     "eager" | "compile" | "compile_max_autotune"

Only an exact match is used. The cache is a JSON file (schema "fuseforge.baselines/1"):

    {"schema": ..., "entries": [{model_hash, gpu, torch, settings, variant, median_ms, p10_ms, p90_ms,
                                 min_ms, mean_ms, trials, peak_bytes, peak_abs_bytes, measured (UTC),
                                 source (who measured it)}]}

`fuseforge suite` writes one per job from its database (the `baselines` table) and names it in the
environment variable FUSEFORGE_BASELINES; the evaluator (`bench.py`) reads it, skips timing the variants
it finds, marks them `"cached": true` with where they came from, and adds what it measured afresh (so a
second plan of the same model in the same job reuses the first plan's baselines). Without the variable
nothing is cached and every variant is timed, as before. This module imports no torch.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path

SCHEMA = "fuseforge.baselines/1"
ENV = "FUSEFORGE_BASELINES"
VARIANTS = ("eager", "compile", "compile_max_autotune")
NUMBERS = ("median_ms", "p10_ms", "p90_ms", "min_ms", "mean_ms", "trials", "peak_bytes", "peak_abs_bytes")
DEVIATIONS = ("deviation_from_eager", "eager_repeat_deviation")  # a compile variant's (bench.py), kept with it
SETTINGS = ("trials", "warmup", "seed", "distribution", "l2_flush_bytes", "timer", "float32_matmul_precision",
            "cudnn_allow_tf32")


def model_hash(path: str | Path) -> str:
    """The model file's key: sha256 of its bytes, 16 hex digits (as the suite's jobs.file_hash)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def canonical_settings(settings: dict) -> dict:
    """The bench settings that are part of the key, in a fixed form (missing ones as None)."""
    return {name: settings.get(name) for name in SETTINGS}


def make_key(model: str, gpu: str | None, torch: str | None, settings: dict) -> dict:
    return {"model_hash": model, "gpu": gpu or "cpu", "torch": torch, "settings": canonical_settings(settings)}


def _same_key(entry: dict, key: dict) -> bool:
    return (entry.get("model_hash") == key["model_hash"] and entry.get("gpu") == key["gpu"]
            and entry.get("torch") == key["torch"]
            and canonical_settings(entry.get("settings") or {}) == key["settings"])


def read(path: Path | None) -> list[dict]:
    """The entries of a cache file; [] if there is none or it cannot be read."""
    if path is None:
        return []
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return []
    entries = data.get("entries") if isinstance(data, dict) and data.get("schema") == SCHEMA else None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def lookup(entries: list[dict], key: dict, variant: str) -> dict | None:
    """The newest entry of `variant` with exactly this key, or None."""
    found = [e for e in entries if e.get("variant") == variant and _same_key(e, key)
             and isinstance(e.get("median_ms"), (int, float))]
    return max(found, key=lambda e: str(e.get("measured") or "")) if found else None


def as_variant(entry: dict) -> dict:
    """A bench variant record made from a cache entry: its numbers, `cached`, and where it came from."""
    return {"status": "ok", "reason": None, **{k: entry.get(k) for k in NUMBERS},
            **{k: entry[k] for k in DEVIATIONS if k in entry}, "cached": True,
            "cached_from": {"measured": entry.get("measured"), "source": entry.get("source")}}


def entry(key: dict, variant: str, record: dict, source: str) -> dict:
    """A cache entry for a variant just measured (`record`: its bench variant record)."""
    return {**key, "variant": variant, **{k: record.get(k) for k in NUMBERS},
            **{k: record[k] for k in DEVIATIONS if k in record},
            "measured": datetime.now(UTC).isoformat(timespec="seconds"), "source": source}


def write(path: Path, entries: list[dict]) -> None:
    """Replace the file's entries atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"schema": SCHEMA, "entries": entries}, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


@contextlib.contextmanager
def _locked(path: Path):
    lock = Path(path).with_name(Path(path).name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def add(path: Path, new: list[dict]) -> None:
    """Add entries to the file (an entry of the same key and variant is replaced), under a file lock."""
    if not new:
        return
    with _locked(path):
        kept = [e for e in read(path)
                if not any(e.get("variant") == n["variant"] and _same_key(e, n) for n in new)]
        write(path, kept + new)


def path_from_env() -> Path | None:
    value = os.environ.get(ENV)
    return Path(value) if value else None
