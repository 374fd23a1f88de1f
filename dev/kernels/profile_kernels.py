"""Which GPU kernels a model runs, and for how long: eager vs torch.compile (default mode), per call.

    .venv/bin/python dev/kernels/profile_kernels.py MODEL.py [MODEL.py ...] --out $OUT/kernels.json
    .venv/bin/python dev/kernels/profile_kernels.py MODEL.py --new MODEL_NEW.py   # ours too ("ours")

For each model file (class Model, get_inputs, get_init_inputs) at its own sizes: warm up, then run
--calls calls under torch.profiler and sum the CUDA time of every kernel by name, divided by the number of
calls. Runs under torch.no_grad() as the benchmark does (--grad: with autograd on; compile then also writes what
backward would need). Also records the output's strides in each mode (does compile return channels_last?). A lab: it
answers "what does compile do that we don't" with kernel names and microseconds; prints a table last.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernel_table(fn, calls: int) -> list[dict]:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    us = defaultdict(float)
    count = defaultdict(int)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            us[event.name] += event.device_time / calls if hasattr(event, "device_time") else event.cuda_time / calls
            count[event.name] += 1
    rows = [{"kernel": k, "us_per_call": v, "launches_per_call": count[k] / calls} for k, v in us.items()]
    return sorted(rows, key=lambda r: -r["us_per_call"])


def profile_model(path: Path, calls: int, new: Path | None = None) -> dict:
    module = _load(path)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).cuda()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    result = {"model": path.stem}
    modes = [("eager", model), ("compile", torch.compile(model))]
    if new is not None:  # an emitted ModelNew file (standalone: its kernels build at the first call)
        modes.append(("ours", _load(new).ModelNew(*module.get_init_inputs()).cuda()))
    for mode, fn in modes:
        out = fn(*inputs)
        out = out[0] if isinstance(out, (tuple, list)) else out
        table = kernel_table(lambda fn=fn: fn(*inputs), calls)
        result[mode] = {"output_stride": list(out.stride()), "output_shape": list(out.shape),
                        "grad_enabled": torch.is_grad_enabled(), "total_us": sum(r["us_per_call"] for r in table), "kernels": table}
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="+", type=Path)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--grad", action="store_true", help="profile with autograd on (default: under no_grad)")
    p.add_argument("--out", type=Path)
    p.add_argument("--new", type=Path, nargs="*", default=[], help="emitted ModelNew files, one per model, in order")
    args = p.parse_args()
    results = []
    for k, path in enumerate(args.models):
        try:
            with torch.set_grad_enabled(args.grad):
                new = args.new[k] if k < len(args.new) else None
                results.append(profile_model(path, args.calls, new))
        except Exception as exc:  # a lab: record and go on
            results.append({"model": path.stem, "error": f"{type(exc).__name__}: {exc}"})
        print(json.dumps({k: v for k, v in results[-1].items() if k == "model" or k == "error"}), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                        "results": results}, indent=1) + "\n")
    for r in results:
        if "error" in r:
            print(f"== {r['model']}: {r['error']}")
            continue
        for mode in [m for m in ("eager", "compile", "ours") if m in r]:
            m = r[mode]
            print(f"== {r['model']} {mode}: {m['total_us']:.1f} us, output stride {m['output_stride']}")
            for k in m["kernels"][:8]:
                print(f"   {k['us_per_call']:9.1f} us  x{k['launches_per_call']:.0f}  {k['kernel'][:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
