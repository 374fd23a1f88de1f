"""CUTLASS's 3xTF32 implicit-GEMM convolution against cuDNN on the fp32-class conv shapes (issue #24, lab).

    .venv/bin/python dev/kernels/conv_cutlass/bench_conv_cutlass.py --cutlass DIR --out $OUT/conv_cutlass.json

DIR: CUTLASS's include folder (the `nvidia-cutlass` wheel's cutlass_library/source/include). Question: our two own
3xTF32 tensor-core convolutions (dev/kernels/conv_direct/README.md) ran at parity with the FFMA direct kernel; is a
tuned one (CUTLASS 2.x, `OpMultiplyAddFastF32`, the few-channels iterator that gathers C = 8 channels of two taps
into a k-step) fast enough to replace cuDNN's exact-fp32 NCHW algorithm on the models where eager is fp32-class
(65, 67, 73, 87: conv 8 -> 64, 3x3), where torch.compile runs TF32 and is 1.04-1.25x faster than fuseforge?

Builds conv_cutlass.cu once per configuration (FF_CONFIG 0-4, in parallel, nvcc -O3 -DNDEBUG for sm_90a, ptxas'
registers and spills recorded), loads them with ctypes. Per model's first Conv2d (its own weights, torch.rand
inputs, seed 0), all on the same input:
  cudnn_nchw        F.conv2d, NCHW, torch's default flags (what eager runs; fp32-class on these shapes)
  cudnn_cl_tf32     F.conv2d on channels-last input and weight (TF32: what compile's conv runs)
  to_nhwc           x.contiguous(memory_format=channels_last): the input transposition CUTLASS needs
  cutlass_<n>       conv_cutlass.cu configuration n, NHWC in, NHWC out (no bias)
Times: labtools.timed, median of --reps CUDA-event timings, 64 MB L2 flush before each. Errors: max |err| / RMS of the float64
convolution of the first --check-batch images; TFLOP/s of each. Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # labtools
KERNELBENCH = (HERE.parents[3] / "shared" / "problems" / "kernelbench").resolve()
MODELS = ("65_Conv2d_AvgPool_Sigmoid_Sum", "67_Conv2d_GELU_GlobalAvgPool", "73_Conv2d_BatchNorm_Scaling",
          "87_Conv2d_Subtract_Subtract_Mish")
CONFIGS = {0: "3xTF32 few-channels 128x64x16, warps 64x32, 3 stages",
           1: "3xTF32 few-channels 256x64x16, warps 64x32, 3 stages",
           2: "3xTF32 few-channels 64x64x16, warps 32x32, 4 stages",
           3: "1xTF32 few-channels 128x64x16, warps 64x32, 3 stages",
           4: "3xTF32 optimized iterator 128x64x16, warps 64x32, 3 stages"}


def build(include: Path, out: Path, jobs: int) -> dict:
    """One shared library per configuration; {n: {"lib", "seconds", "ptxas", "error"}}."""
    out.mkdir(parents=True, exist_ok=True)

    def one(n: int) -> tuple[int, dict]:
        lib = out / f"conv_cutlass_{n}.so"
        cmd = ["nvcc", "-O3", "-DNDEBUG", "-std=c++17", "-arch=sm_90a", f"-DFF_CONFIG={n}", "-Xptxas", "-v",
               "--shared", "-Xcompiler", "-fPIC", f"-I{include}", str(HERE / "conv_cutlass.cu"), "-o", str(lib)]
        t0 = time.time()
        done = subprocess.run(cmd, capture_output=True, text=True)
        lines = [ln for ln in done.stderr.splitlines() if "registers" in ln or "spill" in ln]
        return n, {"lib": str(lib) if done.returncode == 0 else None, "seconds": round(time.time() - t0, 1),
                   "ptxas": lines, "error": None if done.returncode == 0 else done.stderr[-2000:]}

    with ThreadPoolExecutor(jobs) as pool:
        return dict(pool.map(one, CONFIGS))


def first_conv(name: str, batch: int | None):
    import importlib.util

    import torch
    from torch import nn

    path = KERNELBENCH / f"{name}.py"
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    conv = next(m for m in model.modules() if isinstance(m, nn.Conv2d))
    shape = list(module.get_inputs()[0].shape)
    if batch:
        shape[0] = batch
    return conv, shape


def rel_err(out, truth) -> float:
    import torch

    out = out.double()
    if not torch.isfinite(out).all():
        return float("inf")
    rms = truth.pow(2).mean().sqrt().item()
    return (out - truth).abs().max().item() / (rms if rms > 0 else 1.0)


def measure(name: str, libs: dict, args) -> dict:
    import torch
    import torch.nn.functional as F
    from labtools import timed

    conv, shape = first_conv(name, args.batch)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    x = torch.rand(shape, device=dev)
    w = conv.weight.detach().to(dev).contiguous()
    st, pad, dil = conv.stride, conv.padding, conv.dilation
    n, c, h, wd = shape
    k, _, r, s = w.shape
    p = (h + 2 * pad[0] - dil[0] * (r - 1) - 1) // st[0] + 1
    q = (wd + 2 * pad[1] - dil[1] * (s - 1) - 1) // st[1] + 1
    flops = 2.0 * n * k * p * q * c * r * s
    flush = torch.empty(16 * 2**20, dtype=torch.float32, device=dev)
    m = args.check_batch
    truth = F.conv2d(x[:m].double(), w.double(), None, st, pad, dil)  # [m, K, P, Q]
    row = {"model": name, "x_shape": shape, "k": k, "window": [r, s], "stride": list(st), "padding": list(pad),
           "gflop": flops / 1e9, "times_ms": {}, "tflops": {}, "errors": {}, "status": {}}

    def record(label, fn, out_nchw):
        ms = timed(fn, args.reps, flush)
        row["times_ms"][label] = ms
        row["tflops"][label] = flops / ms / 1e9
        row["errors"][label] = rel_err(out_nchw()[:m], truth)

    out = {}
    record("cudnn_nchw", lambda: out.__setitem__("y", F.conv2d(x, w, None, st, pad, dil)), lambda: out["y"])
    x_cl, w_cl = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
    record("cudnn_cl_tf32", lambda: out.__setitem__("y", F.conv2d(x_cl, w_cl, None, st, pad, dil)), lambda: out["y"])
    row["times_ms"]["to_nhwc"] = timed(lambda: x.contiguous(memory_format=torch.channels_last), args.reps, flush)
    w_krsc = w.permute(0, 2, 3, 1).contiguous()
    y = torch.empty(n, p, q, k, device=dev)  # NPQK
    dims = (ctypes.c_int * 13)(n, h, wd, c, k, r, s, pad[0], pad[1], st[0], st[1], dil[0], dil[1])
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    for cfg, lib in libs.items():
        label = f"cutlass_{cfg}"
        fn = getattr(lib, f"ff_conv_cutlass_{cfg}")
        fn.restype = ctypes.c_int
        call = lambda fn=fn: fn(ctypes.c_void_p(x_cl.data_ptr()), ctypes.c_void_p(w_krsc.data_ptr()),  # noqa: E731
                                ctypes.c_void_p(y.data_ptr()), dims, stream)
        y.fill_(float("nan"))
        code = call()
        torch.cuda.synchronize()
        row["status"][label] = code
        if code != 0:
            continue
        record(label, call, lambda: y.permute(0, 3, 1, 2))
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cutlass", type=Path, required=True, help="CUTLASS's include folder")
    p.add_argument("--models", nargs="*", default=list(MODELS))
    p.add_argument("--batch", type=int, default=None, help="override the models' batch")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--check-batch", type=int, default=2)
    p.add_argument("--build-dir", type=Path, default=Path("/tmp/conv_cutlass_build"))
    p.add_argument("--jobs", type=int, default=min(5, os.cpu_count() or 1))
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    builds = build(args.cutlass, args.build_dir, args.jobs)
    for n, b in builds.items():
        print(f"config {n} ({CONFIGS[n]}): {'built' if b['lib'] else 'FAILED'} in {b['seconds']} s; "
              f"{' '.join(b['ptxas'][-2:])[-160:]}", flush=True)
    import torch

    libs = {n: ctypes.CDLL(b["lib"]) for n, b in builds.items() if b["lib"]}
    rows = []
    for name in args.models:
        try:
            rows.append(measure(name, libs, args))
        except Exception as exc:  # a lab: record and go on
            rows.append({"model": name, "error": f"{type(exc).__name__}: {exc}"})
        r = rows[-1]
        if "error" in r:
            print(f"{name}: {r['error']}", flush=True)
            continue
        cells = "  ".join(f"{lab} {ms:.3f} ms {r['tflops'].get(lab, 0):.0f} TF/s err {r['errors'].get(lab, 0):.1e}"
                          if lab in r["errors"] else f"{lab} {ms:.3f} ms" for lab, ms in r["times_ms"].items())
        bad = {lab: code for lab, code in r["status"].items() if code}
        print(f"{name[:24]}: {cells}{'  refused: ' + str(bad) if bad else ''}", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                        "configs": CONFIGS, "builds": builds, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
