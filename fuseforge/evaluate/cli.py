"""Command line: `python -m fuseforge.evaluate MODEL.py CANDIDATE.py --out DIR [options]`.

Verifies the candidate (writes DIR/50_verify.json), then, if it verified and --skip-bench is not given,
benchmarks it (writes DIR/60_bench.json; a stale one is removed otherwise). Prints a short summary.
Exit code 0 iff the verdict is "correct"; tracebacks of failures go to stderr, their one-line reason
into the JSON.

On CUDA, when the environment names a GPU lease (`lease.py`: `fuseforge suite` does), the candidate's
CUDA extension is built first (its `_kernels()`, if it has one), then the lease is taken, and it is held
for verification and benchmark and given back once the results are written: compiling never holds the GPU.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import traceback
from pathlib import Path

import torch

from fuseforge.evaluate import harness, lease
from fuseforge.evaluate.bench import BenchSettings, bench_programs
from fuseforge.evaluate.numerics import FACTOR
from fuseforge.evaluate.verify import VerifySettings, verify_files
from fuseforge.records import json_safe

VERIFY_FILE = "50_verify.json"
BENCH_FILE = "60_bench.json"


def _at_least(low: int):
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fuseforge.evaluate",
                                description="Verify a ModelNew candidate against its Model, then time it.")
    p.add_argument("model", type=Path, help="model file: Model, get_inputs(), get_init_inputs()")
    p.add_argument("candidate", type=Path, help="candidate file: ModelNew with Model's interface")
    p.add_argument("--out", type=Path, required=True, help="directory for 50_verify.json, 60_bench.json")
    p.add_argument("--device", choices=("cuda", "cpu"),
                   default="cuda" if torch.cuda.is_available() else "cpu",
                   help="where everything runs (default: cuda if available)")
    p.add_argument("--seeds", type=_at_least(1), default=3, help="seeds 0..N-1, each with two input distributions")
    p.add_argument("--tolerance-factor", type=float, default=FACTOR,
                   help="candidate error may be this many times eager's error vs fp64 (plus a floor)")
    p.add_argument("--extra-batch", type=_at_least(0), action="append", default=[],
                   help="also verify seed 0 with every input's dim 0 set to N (0: off; repeat for several sizes)")
    p.add_argument("--no-magnitudes", action="store_true",
                   help="leave out the seed-0 cases at large, tiny and shifted magnitudes (the grader's)")
    p.add_argument("--trials", type=_at_least(1), default=50, help="timed rounds")
    p.add_argument("--warmup", type=_at_least(0), default=5, help="untimed calls of each variant first")
    p.add_argument("--no-compile", action="store_true", help="do not time torch.compile")
    p.add_argument("--max-autotune", action="store_true",
                   help="also time torch.compile(mode='max-autotune') (minutes of autotuning per model)")
    p.add_argument("--skip-bench", action="store_true", help="verify only")
    p.add_argument("--baselines", type=Path, default=None,
                   help="baseline cache file (fuseforge/evaluate/baselines.py): reference variants found there "
                        "are not timed again, those timed are added (default: $FUSEFORGE_BASELINES, else none)")
    return p


def write_json(path: Path, record: dict) -> None:
    path.write_text(json.dumps(json_safe(record), indent=2, allow_nan=False) + "\n")


def _fmt(x, spec: str = ".2e") -> str:
    return "n/a" if not isinstance(x, (int, float)) else format(x, spec)


def verify_summary(record: dict) -> str:
    head = f"verify: {record['verdict']}"
    if record["verdict"] != "correct":
        return f"{head}: {record['reason']}"
    cases = [c for c in record["cases"] if not c["skipped"]]
    text = f"{head} ({len(cases)} cases"
    skipped = len(record["cases"]) - len(cases)
    text += f", {skipped} skipped)" if skipped else ")"
    worst = record["worst"]
    if worst:
        text += (f"; worst {worst['name']} at {worst['case']}: rel. error {_fmt(worst['cand_rel_err'])}"
                 f" vs eager's {_fmt(worst['ref_rel_err'])} ({_fmt(worst['ratio'], '.2f')} of the bound)")
    allclose = {True: "yes", False: "no", None: "n/a"}[record["allclose"]]
    return f"{text}; allclose(1e-4) vs eager: {allclose}"


def bench_summary(record: dict) -> str:
    if record["error"]:
        return f"bench: error: {record['error']}"
    variants, speedup = record["variants"], record["speedup"]
    parts = []
    for name in ("candidate", "eager", "compile", "compile_max_autotune"):
        v = variants.get(name)
        if v is None or (name == "compile_max_autotune" and v["status"] == "skipped"):
            continue
        if v["status"] != "ok":
            parts.append(f"{name} {v['status']} ({v['reason']})")
            continue
        text = f"{name} {v['median_ms']:.4g} ms [p10 {v['p10_ms']:.4g}, p90 {v['p90_ms']:.4g}]"
        if v.get("cached"):
            text += f" (cached, measured {(v.get('cached_from') or {}).get('measured')})"
        ratio = speedup.get(f"vs_{name}")
        if ratio:
            text += f" -> candidate {ratio:.2f}x"
        if v.get("peak_bytes") is not None:
            text += f", peak +{v['peak_bytes'] / 2**20:.1f} MiB"
        parts.append(text)
    return "bench: " + "; ".join(parts)


def prebuild(candidate: Path) -> float:
    """Build the candidate's CUDA extension before the GPU is leased: import the file and call its
    `_kernels()` if it has one (fuseforge's ModelNew files do). Failures are left to verification, which
    imports the file again and reports them. Returns the seconds spent."""
    start = time.perf_counter()
    try:
        module = harness._import(Path(candidate).resolve(), "prebuild", harness.CandidateFailed)
        kernels = getattr(module, "_kernels", None)
        if callable(kernels):
            kernels()
    except (Exception, SystemExit):
        traceback.print_exc()
    return round(time.perf_counter() - start, 3)


def _give_back(held: lease.Lease | None, device: torch.device) -> None:
    """Free what this process holds on the GPU, then give the lease back."""
    if held is None:
        return
    gc.collect()
    if device.type == "cuda" and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    held.release()


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 iff the candidate verified)."""
    args = build_parser().parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    settings = VerifySettings(device, args.seeds, args.tolerance_factor, tuple(n for n in args.extra_batch if n),
                              not args.no_magnitudes)
    held = lease.from_env(f"evaluate {args.candidate}") if device.type == "cuda" else None
    prebuild_s = prebuild(args.candidate) if held is not None else None
    if held is not None:
        held.acquire()
    try:
        record, progs = verify_files(args.model, args.candidate, settings)
        record["gpu_lease"] = None if held is None else {"waited_s": round(held.waited_s, 3),
                                                          "prebuild_s": prebuild_s}
        write_json(args.out / VERIFY_FILE, record)
        print(verify_summary(record))
        written = [args.out / VERIFY_FILE]
        bench_path = args.out / BENCH_FILE
        if record["verdict"] == "correct" and not args.skip_bench and progs is not None:
            bench = bench_programs(progs, BenchSettings(device, args.trials, args.warmup, not args.no_compile,
                                                        args.max_autotune, args.baselines))
            write_json(bench_path, bench)
            print(bench_summary(bench))
            written.append(bench_path)
        elif bench_path.exists():
            bench_path.unlink()  # a stale bench next to a new verdict would mislead
    finally:
        progs = None
        _give_back(held, device)
    print("wrote " + ", ".join(str(p) for p in written))
    return 0 if record["verdict"] == "correct" else 1


if __name__ == "__main__":
    sys.exit(main())
