"""Does cuDNN's heuristic pick leave speed behind? Each convolution of the problem models under four flag settings.

    .venv/bin/python dev/kernels/bench_cudnn_flags.py ../shared/problems/*/*.py --out $OUT/cudnn_flags.json

For every distinct convolution (`fuseforge.evaluate.conv_precision.model_convolutions`: the models' own shapes),
without its bias, in NCHW and channels-last, under `torch.backends.cudnn.flags`:

    default            benchmark=False, allow_tf32=True   (eager's: cuDNN's heuristic picks the algorithm)
    benchmark          benchmark=True,  allow_tf32=True   (cuDNN times its algorithms once per shape, keeps the fastest)
    no_tf32            benchmark=False, allow_tf32=False
    benchmark_no_tf32  benchmark=True,  allow_tf32=False

the error vs float64 (conv_precision's measure: max over the first sample / RMS) and the median time (CUDA events,
L2 flushed). The summary names, per convolution, the fastest setting whose error stays in eager's class
(`stays_in_class` against eager's NCHW default) and its speed-up over eager's call. A lab: it says whether a plan
should pick a convolution's flags by measurement; nothing in the product depends on it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

from fuseforge.evaluate.conv_precision import (
    SEED,
    _median_ms,
    model_convolutions,
    precision_class,
    stays_in_class,
)

SETTINGS = {"default": (False, True), "benchmark": (True, True), "no_tf32": (False, False),
            "benchmark_no_tf32": (True, False)}


def _operands(call, device):
    gen = torch.Generator().manual_seed(SEED)
    x = torch.rand(call.input_shape, generator=gen)
    bound = 1.0 / math.prod(call.weight_shape[1:]) ** 0.5
    w = (torch.rand(call.weight_shape, generator=gen) * 2 - 1) * bound
    return x, w


def measure(call, device) -> dict:
    x, w = _operands(call, device)
    with torch.no_grad():
        truth = call.run(x[:1].double().to(device), w.double().to(device), None)
        rms = truth.square().mean().sqrt().item() or 1.0
        row = {}
        for layout in ("nchw", "channels_last"):
            xd, wd = x.to(device), w.to(device)
            if layout == "channels_last":
                fmt = torch.channels_last if call.dims == 2 else torch.channels_last_3d
                xd, wd = xd.contiguous(memory_format=fmt), wd.contiguous(memory_format=fmt)
            for name, (bench, tf32) in SETTINGS.items():
                with torch.backends.cudnn.flags(enabled=True, benchmark=bench, deterministic=False, allow_tf32=tf32):
                    out = call.run(xd, wd, None)
                    error = (out[:1].double() - truth).abs().max().item() / rms
                    del out
                    ms = _median_ms(lambda x=xd, w=wd: call.run(x, w, None), device)
                row[f"{layout}/{name}"] = {"error": error, "ms": ms}
            del xd, wd
            torch.cuda.empty_cache()
    eager = row["nchw/default"]
    fits = {k: v for k, v in row.items() if stays_in_class(eager["error"], v["error"])}
    best = min(fits, key=lambda k: fits[k]["ms"])
    return {"settings": row, "class": precision_class(eager["error"]), "best_in_class": best,
            "speedup_vs_eager": eager["ms"] / fits[best]["ms"],
            "best_channels_last_default_in_class": "channels_last/default" in fits}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    results: dict = {"gpu": torch.cuda.get_device_name(device), "torch": torch.__version__,
                     "cudnn": torch.backends.cudnn.version(), "convolutions": {}}
    seen = set()
    for path in args.models:
        try:
            calls = model_convolutions(path)
        except Exception as exc:  # a model whose convolutions cannot be listed
            print(f"{path.stem}: {exc}", file=sys.stderr)
            continue
        for i, call in enumerate(calls):
            if call in seen:
                continue
            seen.add(call)
            start = time.perf_counter()
            row = measure(call, device) | {"call": {k: getattr(call, k) for k in call.__dataclass_fields__}}
            results["convolutions"][f"{path.stem}/{i}"] = row
            s = row["settings"]
            print(f"{path.stem}/{i}: eager {s['nchw/default']['ms']:.3f} ms ({row['class']}), best in class "
                  f"{row['best_in_class']} {s[row['best_in_class']]['ms']:.3f} ms -> {row['speedup_vs_eager']:.2f}x "
                  f"({time.perf_counter() - start:.1f} s)", flush=True)
            args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
