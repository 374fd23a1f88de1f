"""Direct fp32 convolution with a fused epilogue vs cuDNN (eager, NCHW) and torch.compile (issue #24, lab).

    .venv/bin/python dev/kernels/conv_direct/bench_conv_direct.py --out $OUT/conv_direct.json
    .venv/bin/python dev/kernels/conv_direct/bench_conv_direct.py --batch 8 --out $OUT/quick.json  # quick

Reads the convolution of each listed KernelBench model (its first Conv2d/Conv3d, at get_init_inputs() and
get_inputs() sizes; --batch overrides the batch) and groups models with the same convolution. For each
shape, in its own subprocess (a fault or hang costs that shape only), on the same input (torch.rand, seed 0)
and the model's own initial weight and bias:
  ours_fused     conv_direct.cu with the epilogue fused (--epilogue relu: bias + relu; mish: model 87's tail,
                 bias, - 0.5, - 0.2, mish)
  eager_fused    cuDNN's conv (NCHW, torch's default flags) + the same pointwise ops in torch
  compile_fused  torch.compile (default mode) of that eager module
  ours_conv      conv_direct.cu, epilogue = bias only
  cudnn_conv     F.conv2d/3d alone
Times: median of --reps CUDA-event timings, 64 MB L2 flush before each. Errors on the first --check-batch
images against the float64 conv (+ tail) on the GPU: max|err| / RMS(truth) ("err_*"), NaN-poisoned
outputs (a slot our kernel leaves unwritten shows as NaN). Then an "odd" case: stride 2, padding,
dilation, channel tails, 2-D and 3-D, both row paths, each epilogue, against float64 (pass: < 1e-5).
Prints one line per shape and writes JSON (--out). Exit status 1 if any of ours is wrong or failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import conv_direct_model as cdm  # noqa: E402

KERNELBENCH = (HERE.parents[3] / "shared" / "problems" / "kernelbench").resolve()
MODELS = ("24_Conv3d_Min_Softmax", "27_Conv3d_HardSwish_GroupNorm_Mean", "48_Conv3d_Scaling_Tanh_Multiply_Sigmoid",
          "57_Conv2d_ReLU_HardSwish", "65_Conv2d_AvgPool_Sigmoid_Sum", "67_Conv2d_GELU_GlobalAvgPool",
          "73_Conv2d_BatchNorm_Scaling", "83_Conv3d_GroupNorm_Min_Clamp_Dropout",
          "85_Conv2d_GroupNorm_Scale_MaxPool_Clamp", "87_Conv2d_Subtract_Subtract_Mish")
EPILOGUES = {"bias": 0, "relu": 1, "mish": 2}
SUB_A, SUB_B = 0.5, 0.2  # model 87's two subtracted constants
HBM_GBS, FMA_TFLOPS = 2800.0, 60.0  # H100 SXM: achievable DRAM bandwidth, fp32 FFMA rate (the floors)
ODD_TOL = 1e-5

BINDING = r"""
#include <torch/extension.h>
#include <string>
#define DECL(NAME) extern "C" int conv_direct_##NAME(const float*, const float*, const float*, float*, \
                                                     const int*, int, float, float, void*);
%(decls)s
int64_t conv_direct_out(const std::string& name, torch::Tensor x, torch::Tensor w, torch::Tensor bias,
                        torch::Tensor y, std::vector<int64_t> geometry, int64_t epilogue, double a, double b,
                        int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x: contiguous fp32 CUDA");
    TORCH_CHECK(w.is_contiguous() && y.is_contiguous() && w.scalar_type() == torch::kFloat32, "w, y: contiguous fp32");
    TORCH_CHECK(geometry.size() == 18, "18 geometry ints");
    int g[18];
    for (int i = 0; i < 18; ++i) g[i] = static_cast<int>(geometry[i]);
    const float* bp = bias.numel() ? bias.data_ptr<float>() : nullptr;
    void* s = reinterpret_cast<void*>(stream);
%(dispatch)s
    TORCH_CHECK(false, "no instantiation named ", name);
}
"""


def build(verbose: bool = False):
    """Build (cached on disk by torch) and load the extension for sm_90a."""
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0a")
    from torch.utils.cpp_extension import load_inline

    names = [cf.name for cf in cdm.parse_configs()]
    binding = BINDING % {
        "decls": "\n".join(f"DECL({n})" for n in names),
        "dispatch": "\n".join(f'    if (name == "{n}") return conv_direct_{n}(x.data_ptr<float>(), w.data_ptr<float>(), '
                              f"bp, y.data_ptr<float>(), g, (int)epilogue, (float)a, (float)b, s);" for n in names)}
    return load_inline(name="conv_direct_lab", cpp_sources=[binding], cuda_sources=[cdm.lab_source()],
                       functions=["conv_direct_out"], extra_cflags=["-O3"], extra_cuda_cflags=["-O3"],
                       no_implicit_headers=True, verbose=verbose)


# ---- shapes -------------------------------------------------------------------------------------------------

def _load_module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _first_conv(path: Path, seed: int = 0):
    import torch
    from torch import nn

    module = _load_module(path)
    torch.manual_seed(seed)
    model = module.Model(*module.get_init_inputs())
    conv = next((m for m in model.modules() if isinstance(m, nn.Conv2d | nn.Conv3d)), None)
    return module, conv


def model_shapes(models_dir: Path, names: list[str], batch: int | None) -> list[dict]:
    """One entry per distinct convolution: its geometry, the models that have it."""
    shapes: dict[str, dict] = {}
    for name in names:
        path = models_dir / f"{name}.py"
        try:
            module, conv = _first_conv(path)
            if conv is None:
                raise ValueError("no Conv2d/Conv3d")
            x_shape = list(module.get_inputs()[0].shape)
        except Exception as exc:  # noqa: BLE001 - a broken model file is reported, not fatal
            shapes[name] = {"key": name, "models": [name], "error": f"reading the model: {exc!r}"}
            continue
        if batch:
            x_shape[0] = batch
        spec = {"x_shape": x_shape, "k": conv.out_channels, "window": list(conv.kernel_size),
                "stride": list(conv.stride), "padding": list(conv.padding), "dilation": list(conv.dilation),
                "groups": conv.groups, "bias": conv.bias is not None, "padding_mode": conv.padding_mode}
        key = json.dumps(spec, sort_keys=True)
        entry = shapes.setdefault(key, {"key": key, "models": [], "model_path": str(path), "spec": spec})
        entry["models"].append(name)
    return list(shapes.values())


# ---- measuring (in a worker process) ---------------------------------------------------------------------

def timed(fn, reps: int, flush) -> float:
    import torch

    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _rel_err(out, truth) -> float:
    import torch

    out = out.double()
    if not torch.isfinite(out).all():
        return float("inf")
    rms = truth.pow(2).mean().sqrt().item()
    return (out - truth).abs().max().item() / (rms if rms > 0 else 1.0)


def _tail(epilogue: str):
    import torch.nn.functional as F

    if epilogue == "relu":
        return F.relu
    if epilogue == "mish":
        return lambda v: F.mish((v - SUB_A) - SUB_B)
    return lambda v: v


class _Ours:
    def __init__(self, ext, cf: cdm.Config, g: cdm.Geometry, w, bias):
        import torch

        self.ext, self.cf, self.g, self.w = ext, cf, g, w.contiguous()
        self.bias = bias if bias is not None else torch.empty(0, device=w.device)
        self.geom = g.ints()
        self.shape = [g.n, g.k, g.oh, g.ow] if cf.dims == 2 else [g.n, g.k, g.od, g.oh, g.ow]

    def __call__(self, x, epilogue: str, out=None):
        import torch

        y = torch.empty(self.shape, device=x.device) if out is None else out
        err = self.ext.conv_direct_out(self.cf.name, x, self.w, self.bias, y, self.geom, EPILOGUES[epilogue],
                                       SUB_A, SUB_B, torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"conv_direct_{self.cf.name} returned cudaError {err}")
        return y


def run_shape(entry: dict, args) -> dict:
    import torch
    import torch.nn.functional as F
    from torch import nn

    spec = entry["spec"]
    row = {"models": entry["models"], **spec}
    _, conv = _first_conv(Path(entry["model_path"]))
    conv = conv.cuda().eval()
    w, b = conv.weight.detach(), (conv.bias.detach() if conv.bias is not None else None)
    if spec["groups"] != 1 or spec["padding_mode"] != "zeros":
        raise ValueError("only groups=1, zero padding")
    g = cdm.geometry(spec["x_shape"], spec["k"], spec["window"], spec["stride"], spec["padding"], spec["dilation"])
    cf = cdm.pick_config(cdm.parse_configs(), g.c, spec["window"], g.k)
    if cf is None:
        raise ValueError(f"no instantiation for C={g.c} window={spec['window']}")
    row.update(config=cf.name, smem_bytes=cdm.smem_bytes(cf, g), tiles=cdm.tiles(cf, g))
    ours = _Ours(build(), cf, g, w, b)
    torch.manual_seed(0)
    x = torch.rand(spec["x_shape"], device="cuda")
    tail = _tail(args.epilogue)
    fconv = F.conv2d if cf.dims == 2 else F.conv3d

    class Eager(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = conv

        def forward(self, v):
            return tail(self.conv(v))

    eager = Eager().eval()
    row.update(cudnn_allow_tf32=torch.backends.cudnn.allow_tf32, cudnn_benchmark=torch.backends.cudnn.benchmark,
               epilogue=args.epilogue)
    out_numel = g.n * g.k * g.od * g.oh * g.ow
    flops = 2.0 * out_numel * g.c * cf.kd * cf.kh * cf.kw
    bytes_min = 4.0 * (x.numel() + out_numel + w.numel())
    row.update(gflop=flops / 1e9, min_mb=bytes_min / 1e6,
               floor_ms=max(flops / (FMA_TFLOPS * 1e9), bytes_min / (HBM_GBS * 1e6)))

    with torch.no_grad():
        # errors on the first check_batch images, vs float64 on the GPU; our outputs NaN-poisoned first
        cb = min(args.check_batch, g.n)
        xs = x[:cb].contiguous()
        truth_conv = fconv(xs.double(), w.double(), None if b is None else b.double(), conv.stride, conv.padding,
                           conv.dilation)
        truth_fused = tail(truth_conv)
        ours_cb = _Ours(ours.ext, cf, cdm.Geometry(**{**g.__dict__, "n": cb}), w, b)
        poison = torch.full([cb, *ours.shape[1:]], float("nan"), device="cuda")
        row["err_ours_conv"] = _rel_err(ours_cb(xs, "bias", poison), truth_conv)
        row["err_cudnn_conv"] = _rel_err(conv(xs), truth_conv)
        poison.fill_(float("nan"))
        row["err_ours_fused"] = _rel_err(ours_cb(xs, args.epilogue, poison), truth_fused)
        row["err_eager_fused"] = _rel_err(eager(xs), truth_fused)
        del truth_conv, truth_fused, poison
        # the whole batch: nothing left unwritten
        full = torch.full(ours.shape, float("nan"), device="cuda")
        ours(x, args.epilogue, full)
        row["ours_nan_outputs"] = int(torch.isnan(full).sum().item())
        row["err_ours_vs_eager_fused_rel_rms"] = float(
            ((full[:cb].double() - eager(xs).double()).abs().max() / full[:cb].double().pow(2).mean().sqrt()).item())
        del full

        flush = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        ms = {}
        ms["ours_fused"] = timed(lambda: ours(x, args.epilogue), args.reps, flush)
        ms["eager_fused"] = timed(lambda: eager(x), args.reps, flush)
        ms["ours_conv"] = timed(lambda: ours(x, "bias"), args.reps, flush)
        ms["cudnn_conv"] = timed(lambda: conv(x), args.reps, flush)
        if not args.no_compile:
            t0 = time.perf_counter()
            compiled = torch.compile(Eager().eval())
            row["err_compile_fused"] = _rel_err(compiled(xs), tail(fconv(
                xs.double(), w.double(), None if b is None else b.double(), conv.stride, conv.padding, conv.dilation)))
            ms["compile_fused"] = timed(lambda: compiled(x), args.reps, flush)
            row["compile_s"] = time.perf_counter() - t0
        row["ms"] = ms
        row["ours_tflops"] = flops / (ms["ours_fused"] * 1e9)
        row["ours_gbs"] = bytes_min / (ms["ours_fused"] * 1e6)
        row["peak_mem_gb"] = torch.cuda.max_memory_allocated() / 1e9
    ok = row["err_ours_conv"] <= max(10 * row["err_cudnn_conv"], 1e-5) and row["ours_nan_outputs"] == 0
    row["ours_ok"] = bool(ok)
    return row


ODD_CASES = [  # (config, x_shape, k, window, stride, padding, dilation)
    ("c3_k3x3x3_bk16", [2, 3, 9, 13, 37], 7, [3, 3, 3], [2, 2, 2], [1, 1, 1], [2, 2, 2]),
    ("c3_k3x3x3_bk24", [1, 3, 5, 23, 41], 29, [3, 3, 3], [1, 1, 1], [1, 2, 0], [1, 1, 2]),
    ("c3_k3x3x3_bk16", [3, 3, 7, 40, 70], 16, [3, 3, 3], [1, 1, 1], [0, 0, 0], [1, 1, 1]),
    ("c3_k4x4x4_bk16", [1, 3, 6, 9, 35], 17, [4, 4, 4], [1, 2, 1], [2, 0, 1], [1, 1, 2]),
    ("c3_k4x4x4_bk16", [2, 3, 8, 21, 33], 16, [4, 4, 4], [1, 1, 1], [1, 1, 1], [1, 1, 1]),
    ("c8_k3x3_bk64", [2, 8, 37, 45], 13, [3, 3], [2, 2], [1, 1], [2, 2]),
    ("c8_k3x3_bk64", [1, 8, 19, 70], 70, [3, 3], [1, 2], [2, 1], [1, 3]),
    ("c8_k3x3_bk64", [3, 8, 33, 65], 64, [3, 3], [1, 1], [0, 0], [1, 1]),
]


def run_odd(args) -> dict:
    import torch
    import torch.nn.functional as F

    ext = build()
    configs = {cf.name: cf for cf in cdm.parse_configs()}
    rows = []
    for name, x_shape, k, window, stride, padding, dilation in ODD_CASES:
        cf = configs[name]
        g = cdm.geometry(x_shape, k, window, stride, padding, dilation)
        torch.manual_seed(1)
        x = torch.randn(x_shape, device="cuda")
        w = torch.randn([k, x_shape[1], *window], device="cuda")
        b = torch.randn(k, device="cuda")
        ours = _Ours(ext, cf, g, w, b)
        fconv = F.conv2d if cf.dims == 2 else F.conv3d
        truth = fconv(x.double(), w.double(), b.double(), stride, padding, dilation)
        unit = g.sh == 1 and g.dh == 1
        for epi in ("bias", "relu", "mish") if unit else ("bias", "relu"):
            entry = {"config": name, "x_shape": x_shape, "k": k, "stride": stride, "padding": padding,
                     "dilation": dilation, "epilogue": epi, "unit_rows": unit}
            try:
                y = ours(x, epi, torch.full(ours.shape, float("nan"), device="cuda"))
                torch.cuda.synchronize()
                entry["err"] = _rel_err(y, _tail(epi)(truth))
                entry["ok"] = entry["err"] < ODD_TOL
            except Exception as exc:  # noqa: BLE001
                entry.update(error=repr(exc), ok=False)
            rows.append(entry)
    return {"odd": rows, "ours_ok": all(r["ok"] for r in rows)}


# ---- driver ------------------------------------------------------------------------------------------------

def _worker(args) -> int:
    job = json.loads(Path(args.worker).read_text())
    try:
        result = run_odd(args) if job.get("odd") else run_shape(job, args)
    except Exception as exc:  # noqa: BLE001 - reported in the JSON
        import traceback

        result = {"models": job.get("models"), "error": repr(exc), "traceback": traceback.format_exc()[-3000:]}
    Path(args.worker_out).write_text(json.dumps(result, indent=1))
    return 0


def _spawn(job: dict, args, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        job_path, out_path = Path(tmp) / "job.json", Path(tmp) / "out.json"
        job_path.write_text(json.dumps(job))
        cmd = [sys.executable, __file__, "--worker", str(job_path), "--worker-out", str(out_path),
               "--reps", str(args.reps), "--check-batch", str(args.check_batch), "--epilogue", args.epilogue]
        if args.no_compile:
            cmd.append("--no-compile")
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"models": job.get("models"), "error": f"timed out after {timeout:.0f} s"}
        if out_path.exists():
            result = json.loads(out_path.read_text())
        else:
            result = {"models": job.get("models"), "error": f"worker exited {proc.returncode}",
                      "stderr": proc.stderr[-3000:]}
        result["wall_s"] = time.perf_counter() - t0
        return result


def _line(r: dict) -> str:
    models = ",".join(m.split("_")[0] for m in r.get("models") or [])
    if "error" in r:
        return f"[{models}] FAILED: {r['error']}"
    ms = r["ms"]
    comp = ms.get("compile_fused")
    comp_err = f" compile {r['err_compile_fused']:.1e}" if "err_compile_fused" in r else ""
    vs = f" vs compile {comp / ms['ours_fused']:.2f}x" if comp else ""
    return (f"[{models}] {r['config']} x{r['x_shape']} k={r['k']}: ours {ms['ours_fused']:.3f} ms "
            f"(conv {ms['ours_conv']:.3f}) eager {ms['eager_fused']:.3f} (cudnn conv {ms['cudnn_conv']:.3f}) "
            f"compile {comp if comp is None else round(comp, 3)} | floor {r['floor_ms']:.3f} ms, "
            f"{r['ours_tflops']:.1f} TFLOP/s{vs} | err ours {r['err_ours_conv']:.1e} cudnn {r['err_cudnn_conv']:.1e}"
            f" fused {r['err_ours_fused']:.1e}/{r['err_eager_fused']:.1e}"
            f"{comp_err}"
            f" nan {r['ours_nan_outputs']} {'ok' if r['ours_ok'] else 'WRONG'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--models-dir", type=Path, default=KERNELBENCH)
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--batch", type=int, default=None, help="override the models' batch (quick runs)")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--check-batch", type=int, default=2, help="images checked against float64")
    parser.add_argument("--epilogue", choices=("relu", "mish"), default="relu")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--no-odd", action="store_true")
    parser.add_argument("--timeout", type=float, default=150.0, help="seconds per shape (its subprocess)")
    parser.add_argument("--budget", type=float, default=285.0,
                        help="seconds for the whole run: when less than --compile-reserve is left, the remaining "
                             "shapes skip torch.compile (recorded in meta.compile_skipped_for)")
    parser.add_argument("--compile-reserve", type=float, default=75.0)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return _worker(args)

    import torch

    t0 = time.perf_counter()
    meta = {"torch": torch.__version__, "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None, "args": {
                k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}
    try:
        meta["commit"] = subprocess.run(["git", "-C", str(HERE), "rev-parse", "HEAD"], capture_output=True,
                                        text=True).stdout.strip()
        build()  # once here: the workers load it from torch's cache
        meta["build_s"] = time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001
        print(f"build failed: {exc!r}", flush=True)
        meta["build_error"] = repr(exc)
    results = []
    if "build_error" not in meta:
        if not args.no_odd:
            odd = _spawn({"odd": True, "models": ["odd"]}, args, args.timeout)
            results.append(odd)
            bad = [r for r in odd.get("odd", []) if not r["ok"]]
            print(f"[odd] {len(odd.get('odd', []))} cases, {len(bad)} wrong"
                  + (f": {bad}" if bad else "") + (f" FAILED: {odd['error']}" if "error" in odd else ""), flush=True)
        for entry in model_shapes(args.models_dir, args.models, args.batch):
            left = args.budget - (time.perf_counter() - t0)
            skip_compile = not args.no_compile and left < args.compile_reserve  # stay within the budget
            if skip_compile:
                args.no_compile = True
                meta.setdefault("compile_skipped_for", []).extend(entry["models"])
            r = entry if "error" in entry else _spawn(entry, args, max(30.0, min(args.timeout, left)))
            results.append(r)
            print(_line(r), flush=True)
    meta["total_s"] = time.perf_counter() - t0
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    ok = "build_error" not in meta and all(r.get("ours_ok") for r in results)
    print(f"{'all ours correct' if ok else 'SOME FAILED'}; {meta['total_s']:.0f} s", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
