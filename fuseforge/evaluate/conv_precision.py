"""The precision class of each convolution, measured on the GPU: does it stay in class channels-last?

    python -m fuseforge.evaluate.conv_precision MODEL.py [MODEL.py ...] [--device cuda] [--out FILE.json]
    python -m fuseforge.evaluate.conv_precision --calls CALLS.json [--device cuda] --out FILE.json

cuDNN picks an algorithm per shape and layout. On an H100 (torch 2.11) most fp32 convolutions of the
problem models run TF32-class (error vs float64 ~3e-4 of the output's RMS), some exact fp32-class (~2e-7),
and the same convolution given channels-last tensors can land in the other class. A plan may run a
convolution channels-last only where that keeps it within the verifier's bound of eager's own error
(numerics.py: FACTOR x eager's error + the floor); this module measures it, per convolution:

    error(layout) = max |conv(x, w) in fp32, that layout  -  conv in float64| / RMS(float64 result)
                    over the first sample's outputs (the fp32 call runs on the whole batch)

for the NCHW call (what eager runs) and the channels-last one, on the model's own shapes, with inputs and
weights drawn as the verifier draws them (uniform inputs, the module's initialisation scale), under the
precision flags the process has (eager's). `class` is "fp32" below FP32_CLASS, else "tf32";
`channels_last_in_class` is whether channels-last stays in eager's class: the same class, or an error
within FACTOR x the NCHW error + the floor (`stays_in_class`). The convolutions come from running each
model once under a dispatch mode that records every aten.convolution call (modules and functional calls
alike), or from CALLS.json ({name: ConvCall fields}: what the plan step `layout_precision.py` asks about). On CUDA the measurement holds the GPU lease when the
environment names one (lease.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fuseforge.evaluate.numerics import FACTOR, FLOOR_REL

FP32_CLASS = 3e-5  # error vs float64 (max over the output, relative to its RMS) below which a convolution is
# fp32-class: fp32 sums give ~1e-7..1e-5, TF32 products ~1e-4..1e-2
SEED = 20251125


@dataclass(frozen=True)
class ConvCall:
    """One aten.convolution call: what decides cuDNN's algorithm (shapes, the arguments, the dtype)."""

    input_shape: tuple[int, ...]
    weight_shape: tuple[int, ...]
    bias: bool
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    transposed: bool
    output_padding: tuple[int, ...]
    groups: int

    @property
    def dims(self) -> int:
        return len(self.input_shape) - 2

    def run(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        return torch.ops.aten.convolution.default(x, w, b, list(self.stride), list(self.padding),
                                                  list(self.dilation), self.transposed,
                                                  list(self.output_padding), self.groups)


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls: list[ConvCall] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten.convolution.default:
            x, w, b, stride, padding, dilation, transposed, output_padding, groups = args
            call = ConvCall(tuple(x.shape), tuple(w.shape), b is not None, tuple(stride), tuple(padding),
                            tuple(dilation), bool(transposed), tuple(output_padding), int(groups))
            if call not in self.calls:
                self.calls.append(call)
        return func(*args, **kwargs)


def convolutions(model: torch.nn.Module, inputs: list) -> list[ConvCall]:
    """The distinct convolutions one forward of `model` calls (on the meta device: nothing is computed)."""
    recorder = _Recorder()
    with torch.no_grad(), recorder:
        model(*inputs)
    return recorder.calls


def measure(call: ConvCall, device: torch.device, timed: bool = False) -> dict:
    """The error vs float64 of the call in NCHW and channels-last (module docstring); with `timed` (on CUDA),
    also its time in each layout (`ms_nchw`, `ms_channels_last`: median of TIME_REPS CUDA-event timings, the L2
    flushed before each), the same without the bias (`ms_*_no_bias`: a plan's convolution, its bias rewritten
    into the kernel after it) and the conversion of the NCHW input to channels-last (`ms_to_channels_last`),
    what the cost model's price of cuDNN's convolutions is calibrated on."""
    gen = torch.Generator().manual_seed(SEED)
    x = torch.rand(call.input_shape, generator=gen)
    fan_in = math.prod(call.weight_shape[1:])
    bound = 1.0 / fan_in ** 0.5  # nn.Conv*'s default initialisation scale
    w = (torch.rand(call.weight_shape, generator=gen) * 2 - 1) * bound
    b = (torch.rand(call.weight_shape[1] * call.groups if call.transposed else call.weight_shape[0],
                    generator=gen) * 2 - 1) * bound if call.bias else None
    with torch.no_grad():
        # the fp32 calls run on the whole batch (cuDNN picks its algorithm for the real shape); the float64
        # truth of the first sample alone bounds its cost (a sample's outputs read only its own inputs)
        truth = call.run(x[:1].double().to(device), w.double().to(device),
                         None if b is None else b.double().to(device))
        rms = truth.square().mean().sqrt().item() or 1.0
        xd, wd, bd = x.to(device), w.to(device), None if b is None else b.to(device)
        errors, times = {}, {}
        for layout in ("nchw", "channels_last"):
            if layout == "channels_last" and call.dims in (2, 3):
                fmt = torch.channels_last if call.dims == 2 else torch.channels_last_3d
                xd, wd = xd.contiguous(memory_format=fmt), wd.contiguous(memory_format=fmt)
            elif layout == "channels_last":
                continue  # 1-D: no channels-last form
            out = call.run(xd, wd, bd)
            errors[layout] = (out[:1].double() - truth).abs().max().item() / rms
            del out
            if timed and device.type == "cuda":
                times[layout] = _median_ms(lambda x=xd, w=wd: call.run(x, w, bd), device)
                # a plan's convolution has its bias rewritten into the kernel after it (no bias pass)
                times[f"{layout}_no_bias"] = (_median_ms(lambda x=xd, w=wd: call.run(x, w, None), device)
                                              if bd is not None else times[layout])
                if layout == "channels_last":  # the plan's conversion of an NCHW input
                    nchw_x = x.to(device)
                    times["to_channels_last"] = _median_ms(
                        lambda x=nchw_x, fmt=fmt: x.contiguous(memory_format=fmt), device)
    nchw, cl = errors["nchw"], errors.get("channels_last")
    row = {"error_nchw": nchw, "error_channels_last": cl, "class": precision_class(nchw),
           "class_channels_last": None if cl is None else precision_class(cl),
           "channels_last_in_class": None if cl is None else stays_in_class(nchw, cl)}
    if times:
        row.update(ms_nchw=times["nchw"], ms_channels_last=times.get("channels_last"),
                   ms_nchw_no_bias=times["nchw_no_bias"], ms_channels_last_no_bias=times.get("channels_last_no_bias"),
                   ms_to_channels_last=times.get("to_channels_last"))
    return row


TIME_REPS = 10


def _median_ms(fn, device: torch.device) -> float:
    """Median of TIME_REPS CUDA-event timings of fn() after 3 warm-up calls, 64 MB of L2 flushed before each."""
    flush = torch.empty(64 << 20, dtype=torch.uint8, device=device)
    for _ in range(3):
        fn()
    times = []
    for _ in range(TIME_REPS):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize(device)
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def precision_class(error: float) -> str:
    return "fp32" if error < FP32_CLASS else "tf32"


def stays_in_class(nchw: float, channels_last: float) -> bool:
    """Channels-last keeps eager's precision: the same class (two TF32 algorithms differ by chance, and the
    verifier's bound on the model's output has held such pairs), or within the verifier's bound of eager's
    error on this convolution alone (FACTOR x eager's + the floor)."""
    return precision_class(channels_last) == precision_class(nchw) or channels_last <= FACTOR * nchw + FLOOR_REL


def model_convolutions(path: Path) -> list[ConvCall]:
    """The convolutions of a model file, at its get_inputs() sizes (built and run on the meta device)."""
    from fuseforge.evaluate import harness

    module = harness._import(path, "model", harness.ReferenceFailed)
    with torch.device("meta"):
        model = module.Model(*module.get_init_inputs())
        inputs = [t.to("meta") if isinstance(t, torch.Tensor) else t for t in module.get_inputs()]
    return convolutions(model, inputs)


def call_from_json(fields: dict) -> ConvCall:
    return ConvCall(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuseforge.evaluate.conv_precision",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--calls", type=Path, help="JSON {name: ConvCall fields} to measure instead of models")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--time", action="store_true",
                        help="also time each convolution in each layout (CUDA; median of 10, L2 flushed)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if args.calls:
        from fuseforge.evaluate import lease

        calls = {name: call_from_json(f) for name, f in json.loads(args.calls.read_text()).items()}
        held = lease.from_env("conv precision") if device.type == "cuda" else None
        with held if held is not None else contextlib.nullcontext():
            rows = {name: measure(call, device, args.time) for name, call in calls.items()}
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
        return 0
    env = {"torch": torch.__version__, "device": str(device),
           "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
           "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32}
    rows = []
    for path in args.models:
        try:
            calls = model_convolutions(path)
        except Exception as exc:  # one model that does not load never stops the others
            print(f"{path.name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            continue
        for call in calls:
            row = {"model": path.name, **asdict(call), **measure(call, device, args.time)}
            rows.append(row)
            cl = row["error_channels_last"]
            print(f"{path.name}: conv{call.dims}d{' transposed' if call.transposed else ''} {call.input_shape} "
                  f"-> {row['class']} ({row['error_nchw']:.1e}); channels-last "
                  + ("n/a" if cl is None else f"{row['class_channels_last']} ({cl:.1e}), "
                     f"{'in' if row['channels_last_in_class'] else 'OUT OF'} class")
                  + (f"; {row['ms_nchw']:.3f} ms NCHW" if "ms_nchw" in row else ""), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"environment": env, "convolutions": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
