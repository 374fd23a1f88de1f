"""Optimize many model files on a GPU machine and print one table; full results as JSON.

    python scripts/run_problems.py MODEL.py ... --out DIR [--json results.json] [--jobs 8] [--trials 50]

First every model goes through the CPU stages and its extension is built, in parallel on the CPU cores;
then `fuseforge optimize` runs model by model on the GPU (finding the builds cached), each in its own
process so that one failure costs only that model.

This is the runner the committed H100 results came from. `fuseforge suite` does the same with a database,
resume and several GPUs; once the suite has run on a GPU, it replaces this script.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PREBUILD = """
import sys
from fuseforge.load import import_model_file
module = import_model_file(sys.argv[1])
if hasattr(module, "_kernels"):
    module._kernels()
"""


def _optimize(model: Path, out: Path, extra: list[str], gpu: bool, timeout: int) -> tuple[int, float, str]:
    start = time.time()
    cmd = [sys.executable, "-m", "fuseforge", "optimize", str(model), "-o", str(out), *extra]
    if not gpu:
        cmd.append("--no-gpu")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        code, log = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired:
        code, log = 124, f"timed out after {timeout} s"
    (out.parent / f"{model.stem}.log").write_text(log)
    return code, time.time() - start, log


def _prebuild(model: Path, out: Path) -> str:
    code, _, log = _optimize(model, out, [], gpu=False, timeout=600)
    if code != 0:
        return f"cpu stages failed: {log.strip().splitlines()[-1] if log.strip() else code}"
    proc = subprocess.run([sys.executable, "-c", PREBUILD, str(out / "40_model_new.py")],
                          capture_output=True, text=True, timeout=900)
    return "built" if proc.returncode == 0 else f"build failed: {proc.stderr.strip()[-300:]}"


def _row(model: Path, out: Path, code: int, seconds: float, log: str) -> dict:
    verify = json.loads((out / "50_verify.json").read_text()) if (out / "50_verify.json").exists() else {}
    bench = json.loads((out / "60_bench.json").read_text()) if (out / "60_bench.json").exists() else {}
    variants = bench.get("variants", {})
    worst = verify.get("worst") or {}
    last = [line for line in log.strip().splitlines() if "fuseforge:" in line]
    return {
        "model": model.stem, "exit_code": code, "seconds": round(seconds, 1),
        "verdict": verify.get("verdict", "not run"), "reason": verify.get("reason") or (last[-1] if last else None),
        "worst_rel_err": worst.get("cand_rel_err"), "eager_rel_err": worst.get("ref_rel_err"),
        "allclose_1e-4": verify.get("allclose"),
        **{f"{v}_ms": variants.get(v, {}).get("median_ms") for v in ("eager", "compile", "candidate")},
        **{f"{v}_peak_bytes": variants.get(v, {}).get("peak_bytes") for v in ("eager", "compile", "candidate")},
        "speedup_vs_eager": (bench.get("speedup") or {}).get("vs_eager"),
        "speedup_vs_compile": (bench.get("speedup") or {}).get("vs_compile"),
        "environment": verify.get("environment"),
    }


def _fmt(v, spec: str) -> str:
    return format(v, spec) if isinstance(v, (int, float)) else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 2))
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--timeout", type=int, default=900)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    outs = {m: args.out / m.stem for m in args.models}
    t0 = time.time()
    with ThreadPoolExecutor(args.jobs) as pool:
        built = dict(zip(args.models, pool.map(lambda m: _prebuild(m, outs[m]), args.models)))
    print(f"prebuild: {time.time() - t0:.0f} s; " + ", ".join(f"{m.stem}: {s}" for m, s in built.items()), flush=True)
    rows = []
    for m in args.models:
        code, seconds, log = _optimize(m, outs[m], ["--trials", str(args.trials)], gpu=True, timeout=args.timeout)
        rows.append(_row(m, outs[m], code, seconds, log))
        print(f"{m.stem}: exit {code} in {seconds:.0f} s", flush=True)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
    print(f"\n{'model':34s} {'verdict':10s} {'rel.err':>8s} {'eager':>8s} {'eager ms':>9s} {'compile':>9s} "
          f"{'ours':>9s} {'vs eager':>8s} {'vs comp':>8s} {'peak MiB':>9s}")
    for r in rows:
        print(f"{r['model']:34s} {r['verdict']:10s} {_fmt(r['worst_rel_err'], '8.1e')} "
              f"{_fmt(r['eager_rel_err'], '8.1e')} {_fmt(r['eager_ms'], '9.3f')} {_fmt(r['compile_ms'], '9.3f')} "
              f"{_fmt(r['candidate_ms'], '9.3f')} {_fmt(r['speedup_vs_eager'], '8.2f')} "
              f"{_fmt(r['speedup_vs_compile'], '8.2f')} "
              f"{_fmt((r['candidate_peak_bytes'] or 0) / 2**20 if r['candidate_peak_bytes'] is not None else None, '9.1f')}")
        if r["verdict"] != "correct":
            print(f"    reason: {r['reason']}")
    return 0 if all(r["verdict"] == "correct" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
