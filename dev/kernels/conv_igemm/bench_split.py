"""Lab bench of the conv family's tensor-core kernel (igemm.cuh) on the convolutions of the problem models: its 3xTF32
form (kSplit: fp32-class products) against cuDNN in exact fp32 (eager's call where eager is fp32-class: NCHW, TF32 off)
and cuDNN's default flags, or with `--tf32` its TF32 form against cuDNN's default flags in NCHW and channels-last, with
instance variants (stages, blocks an SM, a persistent launch, the channels-last path).

    .venv/bin/python dev/kernels/conv_igemm/bench_split.py MODEL.py ... [--variants 3x2,4x1,2x2] [--out split.json]
    .venv/bin/python dev/kernels/conv_igemm/bench_split.py --tf32 MODEL.py ... --variants rule,p,p3x2,cl-p3x2

Each distinct convolution of the models (their own shapes, `conv_precision.model_convolutions`) becomes a one-op model
whose conv group the product plans as the 3xTF32 (or TF32) kernel (the cost gate set aside), once per variant of the
instance: "rule" is the product's choice; `[bt-][c2-][m256-][cl-][p][STAGESxBLOCKS]` changes it: bt- a block a tile
(not persistent), c2- clusters of two blocks sharing each weight tile (TF32, the channels-last path, a block a tile),
m256- tiles of 256 pixels (TF32, the channels-last path), cl- the channels-last path, p a persistent launch,
STAGESxBLOCKS the ring's stages and the blocks an SM. The variants build in parallel (one process each), then each runs on
the GPU: median ms after an L2 flush (`labtools.timed`), and its error vs float64 on the first two images (max
|error| / RMS of the output) beside eager's exact-fp32 error; eager's ops (cuDNN, then the bias pass) are timed in
exact fp32 and at PyTorch's default flags. Prints a line per (convolution, variant).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import types
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parents[2] / "tests"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from fuseforge.evaluate.conv_precision import ConvCall, model_convolutions  # noqa: E402


class OneConv(nn.Module):
    """The convolution of a ConvCall with its own weight and bias, as nn.ConvNd / ConvTransposeNd call it."""

    def __init__(self, call: ConvCall):
        super().__init__()
        self.call = call
        self.weight = nn.Parameter(torch.randn(call.weight_shape) / (math.prod(call.weight_shape[1:]) ** 0.5))
        self.bias = nn.Parameter(torch.randn(call.weight_shape[1 if call.transposed else 0])) if call.bias else None

    def forward(self, x):
        c = self.call
        if c.transposed:
            fn = F.conv_transpose2d if c.dims == 2 else F.conv_transpose3d
            return fn(x, self.weight, self.bias, list(c.stride), list(c.padding), list(c.output_padding), c.groups)
        fn = F.conv2d if c.dims == 2 else F.conv3d
        return fn(x, self.weight, self.bias, list(c.stride), list(c.padding), list(c.dilation), c.groups)


def vary(t, variant: str, out: tuple[int, int, int]):
    """The instance `t` (of a convolution whose output extents are `out`) changed as `variant` says (see the module's
    text)."""
    from fuseforge.families.conv import tiling

    if variant == "rule":
        return t
    bm, cluster = t.bm, t.cluster
    if variant.startswith("bt-"):
        t, variant = dataclasses.replace(t, persistent=False), variant[3:]
    if variant.startswith("c2-"):
        t, cluster, variant = dataclasses.replace(t, persistent=False), 2, variant[3:]
    if variant.startswith("m256-"):
        bm, variant = 256, variant[5:]
    if (bm, cluster) != (t.bm, t.cluster):  # the channels-last path, with the rule's stages where they fit
        t = tiling.at_pixels(t, bm, out, cluster)
    if variant.startswith("cl-"):
        t, variant = dataclasses.replace(t, nchw=False), variant[3:]
    if variant.startswith("p"):
        t, variant = dataclasses.replace(t, persistent=True), variant[1:]
    if variant:
        stages, blocks = (int(v) for v in variant.split("x"))
        t = dataclasses.replace(t, stages=stages, min_blocks=blocks)
    return t


def plan_variant(call: ConvCall, variant: str, name: str, tf32: bool = False):
    """(captured, conv group, extension) of the one-op model with the 3xTF32 (tf32: TF32) kernel at `variant`."""
    from fuseforge.capture import capture
    from fuseforge.codegen import generate
    from fuseforge.families import named
    from fuseforge.families.conv import group as conv_group
    from fuseforge.families.conv import tiling
    from fuseforge.load import LoadedModel
    from fuseforge.partition import partition
    from fuseforge.rewrite import rewrite

    torch.manual_seed(0)
    module = OneConv(call).eval()
    x = torch.randn(call.input_shape)
    loaded = LoadedModel(path=types.SimpleNamespace(name=f"{name}.py", stem=name), source="", module=None,
                         model=module, init_args=[], inputs=[x], outputs=[], output_is_tuple=False)
    captured = capture(loaded)
    rewrite(captured.graph, captured)
    for node in captured.graph.nodes:
        if conv_group.is_conv_op(node):
            node.meta[conv_group.EAGER_CLASS] = "tf32" if tf32 else "fp32"
    chooser = "choose_igemm" if tf32 else "choose_split_igemm"
    rule = getattr(tiling, chooser)

    def chosen(*args, **kwargs):  # choose_igemm(dims, c, k, w_in, out), choose_split_igemm(c, k, out, taps)
        return vary(rule(*args, **kwargs), variant, args[4] if tf32 else args[2])

    with mock.patch.object(tiling, chooser, chosen), \
            mock.patch.object(conv_group, "slower_than_cudnn", return_value=None), \
            mock.patch.object(conv_group, "igemm_seconds", return_value=0.0):
        plan = partition(captured.graph, named("conv"))
    groups = [g for g in plan.groups if g.kind == "conv"]
    if len(groups) != 1 or getattr(groups[0].spec.conv.tiling, "split", tf32) == tf32:
        return captured, None, None
    return captured, groups[0], generate(plan, captured.graph, f"{name}.py")


def _load(ext):
    from torch.utils.cpp_extension import load_inline

    return load_inline(name=ext.name, cpp_sources=[ext.binding], cuda_sources=[ext.cuda],
                       functions=list(ext.functions), extra_cflags=list(ext.cflags),
                       extra_cuda_cflags=list(ext.nvcc_flags), no_implicit_headers=True)


def _build(job):
    """In a worker: plan and compile one (convolution, variant); returns the error text or None."""
    call, variant, name, tf32 = job
    try:
        _, group, ext = plan_variant(call, variant, name, tf32)
        if ext is None:
            return f"no {'TF32' if tf32 else '3xTF32'} conv group"
        _load(ext)
        return None
    except Exception as exc:  # noqa: BLE001 - a lab: report and go on
        return f"{type(exc).__name__}: {str(exc)[-400:]}"


def kernel_times(call, calls: int = 3) -> dict[str, float]:
    """Mean microseconds a call of each CUDA kernel `call` launches (the profiler's device times)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    times = {}
    for e in prof.key_averages():
        total = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)
        if total:
            times[e.key[:90]] = total / calls
    return times


def channels_last_ms(call: ConvCall, x, weight, reps: int, flush) -> tuple[float, float]:
    """cuDNN's convolution (no bias) at PyTorch's default flags on channels-last operands, and the input's conversion
    to channels-last: median ms of each."""
    from labtools import timed

    fmt = torch.channels_last if call.dims == 2 else torch.channels_last_3d
    x_cl, w_cl = x.contiguous(memory_format=fmt), weight.contiguous(memory_format=fmt)
    if call.transposed:
        fn = F.conv_transpose2d if call.dims == 2 else F.conv_transpose3d
        conv = lambda: fn(x_cl, w_cl, None, list(call.stride), list(call.padding), list(call.output_padding))  # noqa: E731
    else:
        fn = F.conv2d if call.dims == 2 else F.conv3d
        conv = lambda: fn(x_cl, w_cl, None, list(call.stride), list(call.padding), list(call.dilation))  # noqa: E731
    return timed(conv, reps, flush), timed(lambda: x.contiguous(memory_format=fmt), reps, flush)


def measure(call: ConvCall, variant: str, name: str, reps: int, flush, cudnn_times: dict, tf32: bool = False) -> dict:
    """One built (convolution, variant) on the GPU: its instance, times and errors (see the module's text)."""
    from conv_group_checks import _graph_values, run_cuda
    from labtools import timed

    from fuseforge.evaluate.cpu_check import run_kernel_reference

    row = {"conv": dataclasses.asdict(call), "variant": variant}
    captured, group, ext = plan_variant(call, variant, name, tf32)
    conv = group.spec.conv
    row["tiling"] = dataclasses.asdict(conv.tiling)
    fn = getattr(_load(ext), group.name)
    stream = torch.cuda.current_stream().cuda_stream
    by_name = {n.name: n for n in captured.graph.nodes}
    values = _graph_values(captured, {conv.x: torch.randn(call.input_shape)})
    inputs = [values[i] for i in group.inputs]
    ours = fn(*inputs, stream)
    ours = ours[0] if isinstance(ours, (list, tuple)) else ours
    out = group.outputs[0]

    def eager_ops():  # the group's ops as eager runs them (the convolution in cuDNN, then its bias pass)
        v = {i: values[i] for i in group.inputs}
        for node in group.nodes:
            v[node] = run_cuda(by_name[node], v)
        return v[out]

    # float64 of the first two images (on the GPU), the group's ops as the CPU check runs them
    first = {i: (values[i][:2] if i == conv.x else values[i]).double() for i in group.inputs}
    truth = run_kernel_reference(group, by_name, first)[out]
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
        exact = eager_ops()
    rms = truth.pow(2).mean().sqrt().item()
    row["error_ours"] = (ours[:2].double() - truth).abs().max().item() / rms
    row["error_cudnn_fp32"] = (exact[:2].double() - truth).abs().max().item() / rms
    row["error_cudnn_default"] = (eager_ops()[:2].double() - truth).abs().max().item() / rms
    row["ms_ours"] = timed(lambda: fn(*inputs, stream), reps, flush)
    row["kernels_us"] = kernel_times(lambda: fn(*inputs, stream))
    key = repr(call)
    if key not in cudnn_times:  # eager's ops: cuDNN in exact fp32 (eager's class here), and at PyTorch's default flags
        with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
            fp32 = timed(eager_ops, reps, flush)
        cudnn_times[key] = (fp32, timed(eager_ops, reps, flush))
    row["ms_cudnn_fp32"], row["ms_cudnn_default"] = cudnn_times[key]
    if tf32:  # TF32's competitor: cuDNN channels-last (the plan's other choice), its input's conversion apart
        if key + "cl" not in cudnn_times:
            cudnn_times[key + "cl"] = channels_last_ms(call, values[conv.x], values[conv.w], reps, flush)
        row["ms_cudnn_channels_last"], row["ms_to_channels_last"] = cudnn_times[key + "cl"]
    # 2 x (input pixels of a transposed one, else output pixels) x every weight
    pixels = math.prod(call.input_shape[2:]) if call.transposed else math.prod(exact.shape[2:])
    row["tflops_ours"] = 2 * call.input_shape[0] * pixels * math.prod(call.weight_shape) / row["ms_ours"] / 1e9
    t = conv.tiling
    theirs = (f"cuDNN default {row['ms_cudnn_default']:.3f}, channels-last {row['ms_cudnn_channels_last']:.3f} + "
              f"{row['ms_to_channels_last']:.3f} converting; error {row['error_ours']:.2e} vs cuDNN default "
              f"{row['error_cudnn_default']:.2e}" if tf32 else
              f"cuDNN fp32 {row['ms_cudnn_fp32']:.3f}, default {row['ms_cudnn_default']:.3f}; error "
              f"{row['error_ours']:.2e} vs cuDNN fp32 {row['error_cudnn_fp32']:.2e}")
    print(f"{name} {t.name}, {t.stages} stages x {t.min_blocks} blocks{', persistent' if t.persistent else ''}: ours "
          f"{row['ms_ours']:.3f} ms ({row['tflops_ours']:.1f} TFLOP/s), {theirs}; kernels (us): "
          + ", ".join(f"{k[:40]} {v:.0f}" for k, v in sorted(row["kernels_us"].items(), key=lambda kv: -kv[1])[:3]),
          flush=True)
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+", type=Path)
    p.add_argument("--variants", default="rule")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--jobs", type=int, default=8)
    p.add_argument("--out", type=Path)
    p.add_argument("--tf32", action="store_true", help="the TF32 form (for TF32-class convolutions), not 3xTF32")
    p.add_argument("--once", action="store_true",
                   help="call each built variant once, nothing timed or compared (for Nsight Compute: ncu -k "
                        "regex:conv_igemm_kernel ... python bench_split.py --once ...)")
    args = p.parse_args()
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0a")
    calls: dict[str, ConvCall] = {}
    for model in args.models:
        for call in model_convolutions(model):
            calls.setdefault(repr(call), call)
            print(f"{model.stem}: {call}", flush=True)
    tag = "tf32" if args.tf32 else "split"
    jobs = [(call, v, f"{tag}_{i}_{v.replace('x', '_').replace('-', '_')}", args.tf32)
            for i, call in enumerate(calls.values()) for v in args.variants.split(",")]
    with ProcessPoolExecutor(args.jobs) as pool:
        built = list(pool.map(_build, jobs))
    if args.once:
        from conv_group_checks import _graph_values

        for (call, variant, name, tf32), error in zip(jobs, built):
            if error:
                print(f"{name}: {error}", flush=True)
                continue
            captured, group, ext = plan_variant(call, variant, name, tf32)
            values = _graph_values(captured, {group.spec.conv.x: torch.randn(call.input_shape)})
            try:
                getattr(_load(ext), group.name)(*[values[i] for i in group.inputs],
                                                torch.cuda.current_stream().cuda_stream)
                torch.cuda.synchronize()
                print(f"{name}: called once ({group.spec.conv.tiling.name})", flush=True)
            except Exception as exc:  # noqa: BLE001 - a lab: report and go on
                print(f"{name}: {type(exc).__name__}: {str(exc)[-300:]}", flush=True)
        return 0
    flush = torch.empty(64 << 20, device="cuda")
    rows, cudnn_times = [], {}
    for (call, variant, name, tf32), error in zip(jobs, built):
        if error:
            print(f"{name}: {error}", flush=True)
            rows.append({"conv": dataclasses.asdict(call), "variant": variant, "error": error})
            continue
        try:
            rows.append(measure(call, variant, name, args.reps, flush, cudnn_times, tf32))
        except Exception as exc:  # noqa: BLE001 - a lab: report and go on
            print(f"{name}: {type(exc).__name__}: {str(exc)[-400:]}", flush=True)
            rows.append({"conv": dataclasses.asdict(call), "variant": variant, "error": str(exc)[-400:]})
        if args.out:
            args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
