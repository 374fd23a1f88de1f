"""Stage `bench`: time eager, torch.compile and the candidate in one process, on the same inputs.

Procedure (under `torch.no_grad()`, models built under seed 0 with identical weights, inputs of seed 0 /
"file", both with the device as the default device as in verify; every variant gets its own copy of the
inputs):

- variants: "eager" (Model in fp32), "compile" (`torch.compile` of a copy of Model, default mode; skipped
  with compile=False or on the CPU; if compiling raises, the error is recorded and the rest goes on),
  "compile_max_autotune" (the same with mode="max-autotune"; only with max_autotune=True, which adds
  minutes of autotuning per model), "candidate" (ModelNew).
- warm-up: `warmup` calls of each (at least one, so compilation and lazy builds are not timed).
- deviation (compile variants, after the warm-up): the variant and Model in fp32 run once each on the same
  inputs from the same generator state; `deviation_from_eager` = max over floating outputs of
  RMS(variant - eager) / RMS(eager), and `eager_repeat_deviation` the same for a second eager call (0 for a
  deterministic model; large for random ops, where the deviation says nothing). Set it beside eager's error
  vs float64 (verify): torch.compile may run a convolution channels-last, where cuDNN can pick a TF32
  algorithm for a shape that eager's NCHW runs in fp32.
- `trials` rounds; round r runs the variants in the order rotated by r. Before each timed call the L2 is
  flushed by zeroing a 256 MiB buffer; the call is timed with CUDA events recorded around it, then a
  device synchronize. On the CPU (used by tests) there is no flush and time.perf_counter times the call.
- peak memory (CUDA only), one extra call per variant: synchronize, reset the peak statistics, note
  `memory_allocated()`, call, synchronize; `peak_bytes` is max_memory_allocated() minus that base (what
  the forward itself allocated at its peak), `peak_abs_bytes` the absolute peak.
- the timed rounds and the peak-memory calls run on the CPUs of FUSEFORGE_TIMING_CPUS when it is set
  (`lease.pinned`: `fuseforge suite` keeps its other processes off them).
- baselines (`baselines.py`): with a cache file (BenchSettings.baselines, or FUSEFORGE_BASELINES), a
  reference variant whose key (model file hash, GPU name, torch version, these settings) is in it is not
  built or timed: its record is the cached one, `"cached": true` with `cached_from` {measured, source}.
  The candidate is always timed. Variants timed here are added to the file.

60_bench.json:
    schema       "fuseforge.bench/1"
    model, candidate, device, environment (torch, python, cuda, gpu, capability, precision flags)
    settings     {trials, warmup, l2_flush_bytes, seed, distribution, timer: "cuda_events"|"perf_counter"}
    variants     {eager|compile|compile_max_autotune|candidate: {status: "ok"|"skipped"|"error", reason, median_ms, p10_ms,
                  p90_ms, min_ms, mean_ms, trials, peak_bytes, peak_abs_bytes[, cached: true, cached_from]
                  [, deviation_from_eager, eager_repeat_deviation (compile variants; cached with them)]}}
    baselines    {key: {model_hash, gpu, torch, settings}, file (the cache file or null), cached: [variants
                  taken from it], stored: [variants added to it]}
    speedup      {vs_eager: median(eager)/median(candidate), vs_compile: median(compile)/median(candidate)
                  or null, vs_compile_max_autotune: likewise or null}
    error        null, or one line if eager or the candidate failed while being benched
    seconds      {build, warmup (compiling included), timing, peak}: where the wall time went
    wall_s       seconds spent benching
"""

from __future__ import annotations

import copy
import math
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fuseforge.evaluate import baselines, harness, lease, numerics
from fuseforge.evaluate.harness import CandidateFailed, EvalError, Programs, ReferenceFailed
from fuseforge.evaluate.random_draws import FORWARD_SEED

SCHEMA = "fuseforge.bench/1"
L2_FLUSH_BYTES = 256 * 2**20
VARIANTS = ("eager", "compile", "compile_max_autotune", "candidate")
COMPILE_MODES = {"compile": "default", "compile_max_autotune": "max-autotune"}

# Taken at import time, before any candidate can replace them.
_Event = torch.cuda.Event
_cuda_synchronize = torch.cuda.synchronize
_perf_counter = time.perf_counter


@dataclass
class BenchSettings:
    device: torch.device
    trials: int = 50
    warmup: int = 5
    compile: bool = True
    max_autotune: bool = False
    baselines: Path | None = None  # the baseline cache file (baselines.py); None: FUSEFORGE_BASELINES, if set


class _Timer:
    """Times one call: CUDA events around it after an L2 flush, or perf_counter on the CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.flush_bytes = L2_FLUSH_BYTES if self.cuda else 0
        self.flush_buf = torch.empty(self.flush_bytes // 4, dtype=torch.float32, device=device)

    def time_ms(self, fn) -> float:
        if not self.cuda:
            start = _perf_counter()
            fn()
            return (_perf_counter() - start) * 1e3
        self.flush_buf.zero_()
        start, end = _Event(enable_timing=True), _Event(enable_timing=True)
        start.record()
        out = fn()
        end.record()
        _cuda_synchronize()
        del out
        return start.elapsed_time(end)


def _variants(progs: Programs, settings: BenchSettings, cached: dict) -> tuple[dict, dict, object]:
    """The callables to time, a status record for every variant (skipped and cached ones included), and a
    call of Model in fp32 on the same inputs (for the deviations)."""
    dev = settings.device
    ref, cand = harness.build_pair(progs, 0, dev)
    inputs = harness.draw_inputs(progs, 0, "file", device=dev)
    records = {name: {"status": "ok", "reason": None} for name in VARIANTS}
    models = {}
    if "eager" in cached:
        records["eager"] = cached["eager"]
    else:
        models["eager"] = copy.deepcopy(ref).to(dev)
    wanted = {"compile": (settings.compile, "--no-compile"),
              "compile_max_autotune": (settings.max_autotune, "off (no --max-autotune)")}
    for name, mode in COMPILE_MODES.items():
        on, why_off = wanted[name]
        if not on or dev.type != "cuda":
            records[name] = {"status": "skipped", "reason": why_off if not on else "not on cuda"}
        elif name in cached:
            records[name] = cached[name]
        else:
            models[name] = torch.compile(copy.deepcopy(ref).to(dev), mode=mode)
    models["candidate"] = harness.guard(CandidateFailed, "ModelNew.to(device)", lambda: cand.to(dev))
    calls = {}
    for name, model in models.items():
        args = harness.to_device(inputs, dev)
        calls[name] = lambda model=model, args=args: model(*args)
    reference, args = ref.to(dev), harness.to_device(inputs, dev)
    return calls, records, lambda: reference(*args)


def _tensors(out) -> list[torch.Tensor]:
    items = out if isinstance(out, (list, tuple)) else [out]
    return [t for t in items if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _distance(a: list[torch.Tensor], b: list[torch.Tensor]) -> float | None:
    """max over outputs of RMS(a - b) / RMS(b); None where the outputs do not pair up or b is all zeros."""
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return None
    worst = 0.0
    for x, y in zip(a, b):
        scale = numerics.rms(y)
        if scale == 0 or not math.isfinite(scale):
            return None
        worst = max(worst, numerics.rms(x.double() - y.double()) / scale)
    return worst


def _deviations(calls: dict, records: dict, eager) -> None:
    """How far each compiled variant's outputs are from eager's on the same inputs and seed (module
    docstring): a deviation far above eager's own error vs float64 (verify) means torch.compile ran the
    model in another precision class (e.g. a convolution it made channels-last, where cuDNN picks TF32)."""
    def run(fn) -> list[torch.Tensor]:
        torch.manual_seed(FORWARD_SEED)
        return _tensors(fn())

    try:
        first = run(eager)
        repeat = _distance(run(eager), first)
    except Exception as exc:  # eager itself is benched (and its failures raised) by the timed rounds
        print(f"bench: no deviation measured: eager raised {harness.one_line(exc)}", file=sys.stderr)
        return
    for name in COMPILE_MODES:
        if name in calls:
            records[name]["deviation_from_eager"] = _distance(run(calls[name]), first)
            records[name]["eager_repeat_deviation"] = repeat


def _warm_up(calls: dict, records: dict, settings: BenchSettings) -> None:
    """Call each variant `warmup` times (at least once); a failing compile is recorded and dropped."""
    failures = {"eager": ReferenceFailed, "candidate": CandidateFailed}
    for name in list(calls):
        try:
            for _ in range(max(1, settings.warmup)):
                calls[name]()
            harness.synchronize(settings.device)
        except Exception as exc:
            if name not in COMPILE_MODES:
                raise failures[name](f"{name} raised {harness.one_line(exc)} while benched") from exc
            traceback.print_exception(exc, file=sys.stderr)
            records[name] = {"status": "error", "reason": harness.one_line(exc)}
            del calls[name]


def _time_rounds(calls: dict, timer: _Timer, trials: int) -> dict[str, list[float]]:
    names = list(calls)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(trials):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            samples[name].append(timer.time_ms(calls[name]))
    return samples


def _peak_memory(fn, device: torch.device) -> tuple[int | None, int | None]:
    """(bytes the call allocated at its peak beyond what was allocated before, absolute peak)."""
    if device.type != "cuda":
        return None, None
    _cuda_synchronize()
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    out = fn()
    _cuda_synchronize()
    peak = torch.cuda.max_memory_allocated(device)
    del out
    return peak - base, peak


def _stats(samples: list[float]) -> dict:
    a = np.asarray(samples, dtype=np.float64)
    p10, median, p90 = np.percentile(a, [10, 50, 90])
    return {"median_ms": float(median), "p10_ms": float(p10), "p90_ms": float(p90),
            "min_ms": float(a.min()), "mean_ms": float(a.mean()), "trials": len(samples)}


def _speedup(records: dict, baseline: str) -> float | None:
    base, cand = records[baseline].get("median_ms"), records["candidate"].get("median_ms")
    return base / cand if base and cand else None


def _settings_record(settings: BenchSettings, timer: _Timer) -> dict:
    return {"trials": settings.trials, "warmup": settings.warmup, "seed": 0, "distribution": "file",
            "l2_flush_bytes": timer.flush_bytes, "timer": "cuda_events" if timer.cuda else "perf_counter"}


def baseline_key(progs: Programs, settings_record: dict, environment: dict) -> dict:
    """The cache key of this bench's reference variants (baselines.py); the precision flags are those the
    reference runs under (taken before the candidate was imported)."""
    return baselines.make_key(baselines.model_hash(progs.model_path), environment.get("gpu") or "cpu",
                              environment.get("torch"),
                              {**settings_record, "float32_matmul_precision": progs.precision.matmul,
                               "cudnn_allow_tf32": progs.precision.cudnn_tf32})


def run_bench(progs: Programs, settings: BenchSettings, environment: dict | None = None) -> dict:
    """Time the variants; returns {'settings', 'variants', 'speedup', 'baselines', 'seconds'}.
    Eager/candidate failures raise."""
    timer = _Timer(settings.device)
    progs.precision.restore()
    environment = environment or harness.environment(settings.device)
    settings_record = _settings_record(settings, timer)
    key = baseline_key(progs, settings_record, environment)
    cache_file = settings.baselines or baselines.path_from_env()
    entries = baselines.read(cache_file)
    cached = {}
    for name in baselines.VARIANTS:
        found = baselines.lookup(entries, key, name)
        if found is not None:
            cached[name] = baselines.as_variant(found)
    seconds, last = {}, time.perf_counter()

    def lap(name: str) -> None:
        nonlocal last
        harness.synchronize(settings.device)
        now = time.perf_counter()
        seconds[name] = round(now - last, 4)
        last = now

    with torch.no_grad():
        calls, records, eager = _variants(progs, settings, cached)
        lap("build")
        _warm_up(calls, records, settings)
        _deviations(calls, records, eager)
        del eager  # its model and inputs: not held through the timed rounds and the peak-memory calls
        lap("warmup")
        with lease.pinned(lease.timing_cpus()):
            samples = _time_rounds(calls, timer, settings.trials)
            lap("timing")
            for name, fn in calls.items():
                peak, peak_abs = _peak_memory(fn, settings.device)
                records[name].update(_stats(samples[name]), peak_bytes=peak, peak_abs_bytes=peak_abs)
        lap("peak")
    fresh = [name for name in baselines.VARIANTS if name in calls and records[name].get("status") == "ok"]
    stored = []
    if cache_file is not None and fresh:
        try:
            baselines.add(cache_file, [baselines.entry(key, name, records[name], f"fuseforge.evaluate of "
                                                       f"{progs.candidate_path}") for name in fresh])
            stored = fresh
        except OSError as exc:
            print(f"bench: could not store baselines in {cache_file}: {exc}", file=sys.stderr)
    return {
        "settings": settings_record,
        "variants": records,
        "speedup": {"vs_eager": _speedup(records, "eager"), "vs_compile": _speedup(records, "compile"),
                    "vs_compile_max_autotune": _speedup(records, "compile_max_autotune")},
        "baselines": {"key": key, "file": str(cache_file) if cache_file else None,
                      "cached": [name for name in baselines.VARIANTS if name in cached
                                 and records[name].get("cached")], "stored": stored},
        "seconds": seconds,
    }


def bench_programs(progs: Programs, settings: BenchSettings) -> dict:
    """Bench already-verified programs; never raises. Returns the 60_bench.json record."""
    record = {"schema": SCHEMA, "model": str(progs.model_path), "candidate": str(progs.candidate_path),
              "device": str(settings.device), "environment": None, "settings": None, "variants": None,
              "speedup": None, "baselines": None, "error": None, "seconds": None, "wall_s": None}
    start = time.perf_counter()
    try:
        record["environment"] = harness.environment(settings.device)
        record.update(run_bench(progs, settings, record["environment"]))
    except (Exception, SystemExit) as exc:
        traceback.print_exception(exc, file=sys.stderr)
        record["error"] = str(exc) if isinstance(exc, EvalError) else f"bench failed: {harness.one_line(exc)}"
    record["wall_s"] = round(time.perf_counter() - start, 3)
    return record
