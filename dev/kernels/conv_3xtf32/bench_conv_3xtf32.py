"""The 3xTF32 tensor-core convolution against the product's direct fp32 kernel, cuDNN and float64 (GPU machine).

    .venv/bin/python dev/kernels/conv_3xtf32/bench_conv_3xtf32.py --out $OUT/conv3x.json       # ~2-3 minutes
    .venv/bin/python dev/kernels/conv_3xtf32/bench_conv_3xtf32.py --odd-only                   # correctness only

Builds `lab.lab_source()` with nvcc (ctypes, no torch extension). Then:
1. Odd cases (padding, stride, dilation, padded and blocked channels, channel tails, 3-D, row and column tails):
   our output NaN-poisoned first, + bias, against the float64 convolution on the GPU. err = max |ours - truth| /
   RMS(truth), beside cuDNN fp32's (TF32 off) on the same case; pass = no NaN and err <= 2 x cuDNN fp32's + 1e-7.
2. The development models' few-channel convolutions (their first Conv2d/Conv3d at the file's sizes, the model's
   own initial weights, torch.rand input): times (median of --reps, CUDA events, L2 flushed) of
     conv3x_fused  ours with the epilogue fused (bias; for a model whose tail is "- a - b, mish": that tail too)
     direct_fused  the product's direct fp32 kernel with the same epilogue (what the plan runs today; for the
                   instances that instantiate it)
     eager_fused   cuDNN in NCHW with torch's default flags + the tail in torch (eager)
     cudnn_cl_tf32 cuDNN channels-last with TF32 allowed, conv alone (roughly torch.compile's convolution)
   and errors vs float64 on the first --check-batch images for ours, the direct kernel and eager's conv.
Prints a line per case and writes JSON (--out). Exit status 1 if any odd case fails.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import lab  # noqa: E402
from labtools import nvcc_library, timed  # noqa: E402

KERNELBENCH = HERE.parents[2] / ".." / "shared" / "problems" / "kernelbench"
# instance -> (model, tail): the models whose first convolution the instance covers; tail "mish" = - a - b, mish
MODELS = {
    "c8_k3x3_n64_w4": [("87_Conv2d_Subtract_Subtract_Mish", "mish"), ("67_Conv2d_GELU_GlobalAvgPool", "bias"),
                       ("73_Conv2d_BatchNorm_Scaling", "bias")],
    "c3_k3x3x3_n16": [("48_Conv3d_Scaling_Tanh_Multiply_Sigmoid", "bias")],
    "c3_k3x3x3_n24": [("24_Conv3d_Min_Softmax", "bias")],
    "c3_k4x4x4_n16": [("27_Conv3d_HardSwish_GroupNorm_Mean", "bias")],
}
SUB_A, SUB_B = 0.5, 0.2
KINDS = {"bias": 0, "relu": 1, "mish": 2}
# (instance, x shape, out channels, window, stride, padding, dilation)
ODD = [
    ("c8_k3x3_n64_w4", (2, 8, 37, 70), 64, (3, 3), (1, 1), (1, 1), (1, 1)),
    ("c8_k3x3_n64_w4", (3, 8, 20, 33), 50, (3, 3), (2, 1), (0, 2), (1, 2)),
    ("c8_k3x3_n64_w4", (1, 8, 9, 9), 130, (3, 3), (1, 2), (1, 0), (2, 1)),
    ("c8_k3x3_n64_w4", (2, 8, 31, 100), 64, (3, 3), (1, 1), (0, 0), (1, 1)),
    ("c3_k3x3_n64", (2, 3, 45, 61), 64, (3, 3), (1, 1), (1, 1), (1, 1)),
    ("c3_k3x3x3_n16", (2, 3, 9, 20, 35), 16, (3, 3, 3), (1, 1, 1), (1, 0, 1), (1, 1, 1)),
    ("c3_k3x3x3_n24", (1, 3, 7, 17, 40), 24, (3, 3, 3), (2, 1, 2), (0, 1, 1), (1, 2, 1)),
    ("c3_k4x4x4_n16", (2, 3, 8, 12, 33), 10, (4, 4, 4), (1, 1, 1), (0, 0, 0), (1, 1, 1)),
    ("c16_k3x3_n32", (2, 16, 19, 41), 40, (3, 3), (1, 1), (1, 1), (1, 1)),
    ("c5_k5x5_n8", (3, 5, 23, 50), 7, (5, 5), (1, 2), (2, 2), (1, 1)),
]


class Lab:
    def __init__(self) -> None:
        self.lib = nvcc_library(lab.lab_source(), "conv3x")

    def run(self, prefix: str, name: str, x, w, bias, y, geom: list[int], kind: str = "bias") -> torch.Tensor:
        g = (ctypes.c_int * 18)(*geom)
        fn = getattr(self.lib, f"{prefix}_{name}")
        rc = fn(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(w.data_ptr()),
                ctypes.c_void_p(bias.data_ptr() if bias is not None else 0), ctypes.c_void_p(y.data_ptr()), g,
                KINDS[kind], ctypes.c_float(SUB_A), ctypes.c_float(SUB_B),
                ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        if rc:
            raise RuntimeError(f"{prefix}_{name}: cudaError {rc}")
        return y


def _out_shape(geom: list[int], dims: int) -> list[int]:
    n, k, od, oh, ow = geom[0], geom[5], geom[6], geom[7], geom[8]
    return [n, k, oh, ow] if dims == 2 else [n, k, od, oh, ow]


def _err(out, truth) -> float:
    out = out.double()
    if not torch.isfinite(out).all():
        return float("inf")
    rms = truth.pow(2).mean().sqrt().item()
    return (out - truth).abs().max().item() / (rms if rms > 0 else 1.0)


def _conv(x, w, b, stride, padding, dilation):
    return (F.conv2d if x.dim() == 4 else F.conv3d)(x, w, b, stride, padding, dilation)


def odd_cases(labk: Lab) -> list[dict]:
    rows = []
    for name, x_shape, k, window, stride, padding, dilation in ODD:
        torch.manual_seed(len(rows))
        x = torch.randn(x_shape, device="cuda")
        w = torch.randn(k, x_shape[1], *window, device="cuda") / (x_shape[1] * torch.tensor(window).prod()) ** 0.5
        b = torch.randn(k, device="cuda")
        geom = lab.geometry(x_shape, k, window, stride, padding, dilation)
        y = torch.full(_out_shape(geom, len(x_shape) - 2), float("nan"), device="cuda")
        labk.run("conv3x", name, x, w, b, y, geom)
        torch.cuda.synchronize()
        truth = _conv(x.double(), w.double(), b.double(), stride, padding, dilation)
        torch.backends.cudnn.allow_tf32 = False
        ref = _conv(x, w, b, stride, padding, dilation)
        torch.backends.cudnn.allow_tf32 = True
        row = {"instance": name, "x": list(x_shape), "k": k, "window": list(window), "stride": list(stride),
               "padding": list(padding), "dilation": list(dilation), "nan": int(torch.isnan(y).sum()),
               "err_ours": _err(y, truth), "err_cudnn_fp32": _err(ref, truth)}
        row["pass"] = row["nan"] == 0 and row["err_ours"] <= 2 * row["err_cudnn_fp32"] + 1e-7
        rows.append(row)
        print(f"odd {name:16s} x={x_shape} k={k} s={stride} p={padding} d={dilation}: err {row['err_ours']:.2e} "
              f"(cuDNN fp32 {row['err_cudnn_fp32']:.2e}) nan {row['nan']} {'ok' if row['pass'] else 'FAIL'}",
              flush=True)
    return rows


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def model_case(labk: Lab, name: str, model: str, tail: str, reps: int, check_batch: int, flush) -> dict:
    module = _load(KERNELBENCH / f"{model}.py")
    torch.manual_seed(0)
    net = module.Model(*module.get_init_inputs())
    conv = next(m for m in net.modules() if isinstance(m, torch.nn.Conv2d | torch.nn.Conv3d)).cuda().eval()
    x = torch.rand(*module.get_inputs()[0].shape, device="cuda")
    w, b = conv.weight.detach().contiguous(), conv.bias.detach()
    geom = lab.geometry(tuple(x.shape), conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                        conv.dilation)
    shape = _out_shape(geom, x.dim() - 2)
    y = torch.empty(shape, device="cuda")

    def torch_tail(v):
        return F.mish((v - SUB_A) - SUB_B) if tail == "mish" else v

    row = {"instance": name, "model": model, "tail": tail, "x": list(x.shape), "k": conv.out_channels}
    with torch.no_grad():
        cb = min(check_batch, x.shape[0])
        xs = x[:cb].contiguous()
        truth = torch_tail(_conv(xs.double(), w.double(), b.double(), conv.stride, conv.padding, conv.dilation))
        ys = torch.full([cb, *shape[1:]], float("nan"), device="cuda")
        geom_cb = [cb, *geom[1:]]
        row["err_conv3x"] = _err(labk.run("conv3x", name, xs, w, b, ys, geom_cb, tail), truth)
        has_direct = hasattr(labk.lib, f"direct_{name}")
        if has_direct:
            ys.fill_(float("nan"))
            row["err_direct"] = _err(labk.run("direct", name, xs, w, b, ys, geom_cb, tail), truth)
        row["err_eager"] = _err(torch_tail(conv(xs)), truth)
        del truth, ys
        y.fill_(float("nan"))
        labk.run("conv3x", name, x, w, b, y, geom, tail)
        row["nan_full_batch"] = int(torch.isnan(y).sum())
        x_cl = x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
        conv_cl = torch.nn.Conv2d if x.dim() == 4 else torch.nn.Conv3d
        conv_cl = conv_cl(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                          conv.dilation).cuda()
        conv_cl.load_state_dict(conv.state_dict())
        conv_cl = conv_cl.to(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
        ms = {
            "conv3x_fused": timed(lambda: labk.run("conv3x", name, x, w, b, y, geom, tail), reps, flush),
            "eager_fused": timed(lambda: torch_tail(conv(x)), reps, flush),
        }
        if has_direct:
            ms["direct_fused"] = timed(lambda: labk.run("direct", name, x, w, b, y, geom, tail), reps, flush)
        torch.backends.cudnn.allow_tf32 = True
        ms["cudnn_cl_tf32"] = timed(lambda: conv_cl(x_cl), reps, flush)
    gflop = 2.0 * torch.tensor(shape).prod().item() * conv.in_channels * torch.tensor(conv.kernel_size).prod().item()
    row.update(ms=ms, gflop=gflop / 1e9, conv3x_tflops=gflop / (ms["conv3x_fused"] * 1e9))
    print(f"{name:16s} {model:40s} {tail:5s} " + " ".join(f"{k} {v:.3f}" for k, v in ms.items())
          + f"  ms; err conv3x {row['err_conv3x']:.1e} direct {row.get('err_direct', float('nan')):.1e} "
          f"eager {row['err_eager']:.1e}"
          f"; {row['conv3x_tflops']:.1f} TFLOP/s", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--check-batch", type=int, default=4)
    parser.add_argument("--odd-only", action="store_true")
    args = parser.parse_args()
    labk = Lab()
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "odd": odd_cases(labk), "models": []}
    flush = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    if not args.odd_only:
        for name, models in MODELS.items():
            for model, tail in models:
                try:
                    result["models"].append(model_case(labk, name, model, tail, args.reps, args.check_batch, flush))
                except Exception as exc:  # noqa: BLE001 - one shape's failure is recorded, the rest still run
                    result["models"].append({"instance": name, "model": model, "error": repr(exc)})
                    print(f"{name} {model}: {exc!r}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    sys.exit(0 if all(r["pass"] for r in result["odd"]) else 1)


if __name__ == "__main__":
    main()
