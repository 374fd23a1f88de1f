"""Our 3xTF32 GEMM (gemm_3xtf32.cu, variant 2) against CUTLASS's 3xTF32 GEMM (cutlass_3xtf32.cu) and cuBLAS
SGEMM, on the GPU, in one run: TFLOP/s and error vs float64 of each.

    python3 dev/kernels/bench_cutlass.py --cutlass-include PATH/include --out $OUT/cutlass.json

PATH/include: the CUTLASS headers (the `nvidia-cutlass` wheel's cutlass_library/source/include). Timing and
checks are bench_gemm's (median of --reps CUDA-event-timed calls, L2 flushed before each).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import shutil
import subprocess
import sys
from pathlib import Path

import bench_gemm as bg

HERE = Path(__file__).resolve().parent
CUTLASS_SOURCE = HERE / "cutlass_3xtf32.cu"
CONFIGS = {0: "block 128x64x16, warps 64x32, 3 stages (example 27)", 1: "block 128x128x16, warps 64x32, 4 stages",
           2: "block 128x128x32, warps 64x32, 3 stages"}
CASES = [c for c in bg.CASES if c.layout == "tn" and c.batch == 1 and c.epilogue == "none" and c.pad == 0]


def build_cutlass(build_dir: Path, include: Path) -> Path:
    lib = build_dir / "libcutlass3x.so"
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    cmd = [nvcc, "-shared", "-Xcompiler", "-fPIC", "-O3", "-DNDEBUG", "-std=c++17",
           "-gencode=arch=compute_90a,code=sm_90a", f"-I{include}", "-o", str(lib), str(CUTLASS_SOURCE)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"nvcc failed:\n{' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    return lib


def time_case(torch, case, ours, cutlass, flush, stream: int, args) -> dict:
    """Each implementation on one case: its time, rate and error vs float64 (or why it did not run)."""
    ops = bg.Operands(torch, case)
    a, b, c = ops.a[0], ops.b[0], ops.c[0]
    m, n, k = case.m, case.n, case.k
    ref = ops.torch_product(torch, case, torch.float64)[0]
    flops = 2.0 * m * n * k

    def run_cutlass(cfg: int) -> int:
        return cutlass.cutlass3x_tn(cfg, a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k, k, k, n, stream)

    runs = {"ours (variant 2)": lambda: bg.launch_ours(ours, ops, case, stream)}
    runs.update({f"cutlass {cfg}: {what}": (lambda cfg=cfg: run_cutlass(cfg)) for cfg, what in CONFIGS.items()})
    results = {}
    for label, fn in runs.items():
        c.fill_(float("nan"))
        rc = fn()
        torch.cuda.synchronize()
        if rc != 0:
            results[label] = {"error": f"returned {rc}"}
            continue
        ms = bg.time_ms(torch, fn, flush, args.warmup, args.reps)
        results[label] = {"ms": ms, "tflops": flops / (ms * 1e9), "rel_err": bg.rel_err(torch, c, ref)}
    bg.set_tf32(torch, False)
    out = a @ b.T
    ms = bg.time_ms(torch, lambda: a @ b.T, flush, args.warmup, args.reps)
    results["cuBLAS SGEMM"] = {"ms": ms, "tflops": flops / (ms * 1e9), "rel_err": bg.rel_err(torch, out, ref)}
    return {"case": case.name, "results": results}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cutlass-include", type=Path, required=True)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--reps", type=int, default=25)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--build-dir", type=Path, default=Path("/tmp/bench_cutlass"))
    args = parser.parse_args()
    if not (args.cutlass_include / "cutlass" / "cutlass.h").is_file():
        sys.exit(f"--cutlass-include {args.cutlass_include}: no cutlass/cutlass.h there")
    args.build_dir.mkdir(parents=True, exist_ok=True)
    cutlass = ctypes.CDLL(str(build_cutlass(args.build_dir, args.cutlass_include)))
    p, i = ctypes.c_void_p, ctypes.c_int
    cutlass.cutlass3x_tn.argtypes, cutlass.cutlass3x_tn.restype = [i, p, p, p, i, i, i, i, i, i, p], i
    ours_lib, _ = bg.build(args.build_dir, 3)
    ours = bg.load(ours_lib)
    ours.gemm3x_set_variant(bg.VARIANTS["ws"])

    import torch

    flush = torch.empty(256 * 1024 * 1024 // 4, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    rows = []
    for case in CASES:
        row = time_case(torch, case, ours, cutlass, flush, stream, args)
        rows.append(row)
        print(f"\n{case.name}")
        for label, r in row["results"].items():
            print(f"  {label:<58} " + (r["error"] if "error" in r else
                  f"{r['ms']:8.3f} ms {r['tflops']:7.1f} TFLOP/s  err {r['rel_err']:.2e}"), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                        "configs": CONFIGS, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
