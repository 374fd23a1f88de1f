"""Compile the CUDA unit of every plan under a folder of optimize runs (a fuzz campaign's runs/, a suite's jobs) with
nvcc for sm_90a and read ptxas' report: which units do not compile, which kernels spill, which have their wgmmas
serialised (ptxas' warning: the tensor-core kernels would run far slower). No GPU needed.

    .venv/bin/python dev/compile_runs.py /tmp/fuzz/runs [--jobs 2] [--out compile.json]

Each `30_kernels/kernels.cu` found (first rungs and the `attempts/` ones) is compiled as CI's compile tests do
(`nvcc -cubin -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v`); prints one line per failure or spill and
the counts.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def compile_unit(unit: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run = subprocess.run([shutil.which("nvcc") or "nvcc", "-std=c++17", "-cubin", "-O3",
                              "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "-v", "-o",
                              str(Path(tmp) / "k.cubin"), str(unit)], capture_output=True, text=True, timeout=600)
    spills = [line.strip() for line in run.stderr.splitlines()
              if "spill" in line and "0 bytes spill stores, 0 bytes spill loads" not in line]
    serialized = [line.strip() for line in run.stderr.splitlines() if "serialized" in line]
    registers = [int(r) for r in re.findall(r"Used (\d+) registers", run.stderr)]
    error = next((line for line in run.stderr.splitlines() if "error" in line), run.stderr[-300:])
    return {"unit": str(unit), "ok": run.returncode == 0, "error": None if run.returncode == 0 else error,
            "spills": spills, "serialized": serialized, "max_registers": max(registers, default=0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    units = sorted(args.folder.glob("**/30_kernels/kernels.cu"))
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(compile_unit, units))
    for r in results:
        if not r["ok"]:
            print(f"FAILED {r['unit']}: {r['error']}")
        elif r["spills"]:
            print(f"SPILLS {r['unit']}: {r['spills'][0]}")
        if r["serialized"]:
            print(f"SERIALIZED {r['unit']}: {r['serialized'][0][:200]}")
    failed = sum(not r["ok"] for r in results)
    spilled = sum(bool(r["spills"]) for r in results)
    serial = sum(bool(r["serialized"]) for r in results)
    print(f"{len(results)} units: {len(results) - failed} compiled, {failed} failed, {spilled} with spills, "
          f"{serial} with serialised wgmmas")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
