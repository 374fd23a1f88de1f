"""Command line: `python -m fuseforge.evaluate MODEL.py CANDIDATE.py --out DIR [options]`.

Verifies the candidate (writes DIR/50_verify.json), then, if it verified and --skip-bench is not given,
benchmarks it (writes DIR/60_bench.json; a stale one is removed otherwise). Prints a short summary.
Exit code 0 iff the verdict is "correct"; tracebacks of failures go to stderr, their one-line reason
into the JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

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
    p.add_argument("--extra-batch", type=_at_least(0), default=0,
                   help="also verify seed 0 with every input's dim 0 set to N (0: off)")
    p.add_argument("--trials", type=_at_least(1), default=50, help="timed rounds")
    p.add_argument("--warmup", type=_at_least(0), default=5, help="untimed calls of each variant first")
    p.add_argument("--no-compile", action="store_true", help="do not time torch.compile")
    p.add_argument("--max-autotune", action="store_true",
                   help="also time torch.compile(mode='max-autotune') (minutes of autotuning per model)")
    p.add_argument("--skip-bench", action="store_true", help="verify only")
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
        ratio = speedup.get(f"vs_{name}")
        if ratio:
            text += f" -> candidate {ratio:.2f}x"
        if v["peak_bytes"] is not None:
            text += f", peak +{v['peak_bytes'] / 2**20:.1f} MiB"
        parts.append(text)
    return "bench: " + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 iff the candidate verified)."""
    args = build_parser().parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    settings = VerifySettings(device, args.seeds, args.tolerance_factor, args.extra_batch or None)
    record, progs = verify_files(args.model, args.candidate, settings)
    write_json(args.out / VERIFY_FILE, record)
    print(verify_summary(record))
    written = [args.out / VERIFY_FILE]
    bench_path = args.out / BENCH_FILE
    if record["verdict"] == "correct" and not args.skip_bench and progs is not None:
        bench = bench_programs(progs, BenchSettings(device, args.trials, args.warmup, not args.no_compile,
                                                         args.max_autotune))
        write_json(bench_path, bench)
        print(bench_summary(bench))
        written.append(bench_path)
    elif bench_path.exists():
        bench_path.unlink()  # a stale bench next to a new verdict would mislead
    print("wrote " + ", ".join(str(p) for p in written))
    return 0 if record["verdict"] == "correct" else 1


if __name__ == "__main__":
    sys.exit(main())
