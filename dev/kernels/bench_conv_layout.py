"""Where torch.compile's speed on convolution models comes from: the memory layout of the convolution (issue #6).

    .venv/bin/python dev/kernels/bench_conv_layout.py [MODELS_DIR ...] --out $OUT/conv_layout.json

For every model file whose Model holds a Conv1d/2d/3d or ConvTranspose1d/2d/3d, at its get_inputs() sizes:
the whole model in eager (and with --compile in torch.compile's default mode), and its first convolution alone, fed the input
the model gets (so only for convolutions that are the model's first op):
  nchw       the module as eager runs it (contiguous input and weight)
  cl         input and weight already in channels_last (the convolution alone)
  cl+in      converting the input to channels_last first (what a ModelNew would pay per call)
  cl+in+out  ... and converting the output back to contiguous
Medians of --reps CUDA-event timings, L2 flushed before each. The output of each layout is compared with
the NCHW one (max abs difference relative to max abs value). Prints a table last.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import sys
from pathlib import Path

import torch
from bench_reduce_weight import timed  # this folder's CUDA-event timer
from torch import nn

CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
FLUSH = torch.empty(0)


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _time(fn, reps: int) -> float:
    """Median ms of fn() over reps, L2 flushed before each."""
    return timed(fn, reps, FLUSH)


def _layout_fmt(dim: int):
    return {4: torch.channels_last, 5: torch.channels_last_3d}.get(dim)


def bench_model(path: Path, reps: int, compile_too: bool) -> dict | None:
    module = _load(path)
    model = module.Model(*module.get_init_inputs()).cuda()
    conv = next((m for m in model.modules() if isinstance(m, CONVS)), None)
    if conv is None:
        return None
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    row = {"model": path.stem, "conv": repr(conv), "input": list(inputs[0].shape)}
    with torch.no_grad():
        row["eager_ms"] = _time(lambda: model(*inputs), reps)
        if compile_too:
            compiled = torch.compile(model)
            row["compile_ms"] = _time(lambda: compiled(*inputs), reps)
        x = inputs[0]
        fmt = _layout_fmt(x.dim())
        reference = conv(x)
        row["nchw_ms"] = _time(lambda: conv(x), reps)
        if fmt is None:
            return row
        x_cl = x.contiguous(memory_format=fmt)
        cl_conv = copy.deepcopy(conv)
        cl_conv.weight.data = cl_conv.weight.data.contiguous(memory_format=fmt)
        out_cl = cl_conv(x_cl)
        row["cl_output_is_channels_last"] = bool(out_cl.is_contiguous(memory_format=fmt))
        row["cl_rel_diff"] = float((out_cl - reference).abs().max() / reference.abs().max())
        row["cl_ms"] = _time(lambda: cl_conv(x_cl), reps)
        row["cl_in_ms"] = _time(lambda: cl_conv(x.contiguous(memory_format=fmt)), reps)
        row["cl_in_out_ms"] = _time(lambda: cl_conv(x.contiguous(memory_format=fmt)).contiguous(), reps)
        row["output_mb"] = reference.numel() * 4 / 2**20
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dirs", nargs="*", type=Path, default=[Path("../shared/problems")])
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--compile", action="store_true", help="also time the whole model under torch.compile (slow)")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    global FLUSH
    FLUSH = torch.empty(64 * 2**20, dtype=torch.int32, device="cuda")  # 256 MB > L2
    rows = []
    for path in sorted(f for d in args.dirs for f in d.rglob("*.py")):
        try:
            row = bench_model(path, args.reps, args.compile)
        except Exception as exc:  # a lab: record and go on
            row = {"model": path.stem, "error": f"{type(exc).__name__}: {exc}"}
        if row:
            rows.append(row)
            print(json.dumps(row), flush=True)
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "cudnn": torch.backends.cudnn.version(), "allow_tf32_cudnn": torch.backends.cudnn.allow_tf32,
              "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    cols = ("eager_ms", "compile_ms", "nchw_ms", "cl_ms", "cl_in_ms", "cl_in_out_ms", "cl_rel_diff")
    print(f"{'model':34s}" + "".join(f"{c:>14s}" for c in cols))
    for r in rows:
        print(f"{r['model'][:34]:34s}" + "".join(f"{r[c]:14.4g}" if isinstance(r.get(c), float) else f"{'-':>14s}"
                                                  for c in cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
