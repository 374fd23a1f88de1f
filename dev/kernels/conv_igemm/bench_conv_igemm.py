"""TF32 implicit-GEMM convolution (wgmma + TMA) with a fused epilogue vs cuDNN and torch.compile (lab).

    .venv/bin/python dev/kernels/conv_igemm/bench_conv_igemm.py --out $OUT/conv_igemm.json
    .venv/bin/python dev/kernels/conv_igemm/bench_conv_igemm.py --batch 4 --no-compile --out $OUT/quick.json

First an "odd" case (small shapes: padding, dilation, 2-D and 3-D, channel counts that are no multiple of
4 or 32, output channels that are no multiple of the tile) against float64, then one entry per distinct
convolution of the listed models (their first Conv/ConvTranspose with stride 1 and one group; a transposed
one as the equivalent convolution: weight swapped and flipped, padding dilation*(k-1) - p). Per shape, in
its own subprocess (a hang costs that shape only), on randn input and the model's own initial weight/bias:
  ours        conv_igemm with bias + relu fused, for each instantiation (the best one is 'ours'): nchw_*
              read the NCHW input (W a multiple of 4); cl_* and halo_* run conv_igemm_prepare_input (NCHW ->
              channels-last, TF32-rounded) first; 'ours_cl_conv' leaves that out (what it costs when the
              input already comes channels-last)
  eager       F.conv (NCHW, torch's default flags: cuDNN may use TF32) + relu
  cudnn_cl    F.conv on a channels-last input (conversion not timed) + relu
  compile     torch.compile (default) of conv + relu
Errors: max|err| / RMS(truth) on the first --check-batch images vs float64 on the GPU; our output is
NaN-poisoned first, so an element it leaves unwritten shows. Times: median of --reps CUDA-event timings,
64 MB L2 flush before each. Writes JSON (--out); exit 1 if any of ours is wrong.
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
PACKAGE_CONV = HERE.parents[2] / "fuseforge" / "families" / "conv"  # igemm.cuh: the kernel's one copy
sys.path.insert(0, str(HERE.parents[2]))
# the bench's tiles are the product's (families/conv/tiling.py)
from fuseforge.families.conv.tiling import NCHW_BOX_WIDTH as BOX_WIDTH  # noqa: E402
from fuseforge.families.conv.tiling import pixel_box  # noqa: E402

KERNELBENCH = (HERE.parents[3] / "shared" / "problems" / "kernelbench").resolve()
DEV = (HERE.parents[3] / "shared" / "problems" / "dev").resolve()
MODELS = ("17_Conv2d_InstanceNorm_Divide", "32_Conv2d_Scaling_Min", "52_Conv2d_Activation_BatchNorm",
          "43_Conv3d_Max_LogSumExp_ReLU", "7_Conv3d_ReLU_LeakyReLU_GELU_Sigmoid_BiasAdd",
          "10_ConvTranspose2d_MaxPool_Hardtanh_Mean_Tanh", "42_ConvTranspose2d_GlobalAvgPool_BiasAdd_LogSumExp_Sum_Multiply",
          "61_ConvTranspose3d_ReLU_GroupNorm", "77_ConvTranspose3d_Scale_BatchNorm_GlobalAvgPool",
          "conv2d_batchnorm_relu", "conv2d_channelmin_tanh", "conv2d_groupnorm_hardswish", "conv2d_avgpool_linear",
          "conv3d_maxpool_sigmoid_sum")
INSTANCES = ("cl_n128_s4_b1", "cl_n64_s4_b2", "nchw_n128_s4_b1", "nchw_n64_s6_b1",
             "cl_n128_s4_b1_st", "cl_n64_s4_b2_st", "nchw_n128_s4_b1_st", "nchw_n64_s6_b1_st",  # _st: staged epilogue
             "halo_n128", "halo_n128_st", "halo_n64_st",  # halo: the input row read once per row of taps
             "cl_n128_s3_b2")  # two blocks an SM: one's epilogue overlaps the other's main loop
GEOM_FIELDS = "n c cp cq d h w k od oh ow kd kh kw pd ph pw dd dh dw bd bh bw bwb".split()

BINDING = r"""
#include <torch/extension.h>
#include <string>
#define DECL(NAME) extern "C" int conv_igemm_##NAME(const float*, const float*, const float*, float*, const int*, \
                                                    int, void*);
%(decls)s
extern "C" int conv_igemm_prepare_input(const float*, float*, int, int, int, long long, void*);
int64_t conv_igemm_out(const std::string& name, torch::Tensor x_cl, torch::Tensor w_re, torch::Tensor bias,
                       torch::Tensor y, std::vector<int64_t> geometry, int64_t act, int64_t stream) {
    TORCH_CHECK(x_cl.is_cuda() && x_cl.is_contiguous() && w_re.is_contiguous() && y.is_contiguous(), "contiguous");
    TORCH_CHECK(geometry.size() == 24, "24 geometry ints");
    int g[24];
    for (int i = 0; i < 24; ++i) g[i] = static_cast<int>(geometry[i]);
    const float* bp = bias.numel() ? bias.data_ptr<float>() : nullptr;
    void* s = reinterpret_cast<void*>(stream);
%(dispatch)s
    TORCH_CHECK(false, "no instantiation named ", name);
}
int64_t prepare_input(torch::Tensor x, torch::Tensor out, int64_t cp, int64_t stream) {
    TORCH_CHECK(x.is_contiguous() && out.is_contiguous(), "contiguous");
    const long long spatial = x[0][0].numel();
    return conv_igemm_prepare_input(x.data_ptr<float>(), out.data_ptr<float>(), (int)x.size(0), (int)x.size(1),
                                    (int)cp, spatial, reinterpret_cast<void*>(stream));
}
"""


def build(verbose: bool = False):
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0a")
    from torch.utils.cpp_extension import load_inline

    binding = BINDING % {
        "decls": "\n".join(f"DECL({n})" for n in INSTANCES),
        "dispatch": "\n".join(f'    if (name == "{n}") return conv_igemm_{n}(x_cl.data_ptr<float>(), '
                              f"w_re.data_ptr<float>(), bp, y.data_ptr<float>(), g, (int)act, s);"
                              for n in INSTANCES)}
    return load_inline(name="conv_igemm_lab", cpp_sources=[binding], cuda_sources=[(HERE / "conv_igemm.cu").read_text()],
                       functions=["conv_igemm_out", "prepare_input"], extra_cflags=["-O3"],
                       extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a"],
                       extra_include_paths=[str(PACKAGE_CONV)],
                       no_implicit_headers=True, verbose=verbose)


# ---- geometry ----------------------------------------------------------------------------------------------

def round_up(v: int, m: int) -> int:
    return (v + m - 1) // m * m


def geometry(x_shape, k, window, padding, dilation) -> dict:
    dims = len(window)
    n, c, *sp = x_shape
    d, h, w = ([1] + sp) if dims == 2 else sp
    kd, kh, kw = ([1] + list(window)) if dims == 2 else list(window)
    pd, ph, pw = ([0] + list(padding)) if dims == 2 else list(padding)
    dd, dh, dw = ([1] + list(dilation)) if dims == 2 else list(dilation)
    od, oh, ow = (d + 2 * pd - dd * (kd - 1), h + 2 * ph - dh * (kh - 1), w + 2 * pw - dw * (kw - 1))
    bd, bh, bw = pixel_box(od, oh, ow)
    return dict(n=n, c=c, cp=round_up(c, 4), cq=round_up(c, 32), d=d, h=h, w=w, k=k, od=od, oh=oh, ow=ow, kd=kd,
                kh=kh, kw=kw, pd=pd, ph=ph, pw=pw, dd=dd, dh=dh, dw=dw, bd=bd, bh=bh, bw=bw, bwb=BOX_WIDTH[bw],
                dims=dims)


def relayout_weight(weight, cq: int):
    """[K, C, *window] -> [K, taps, cq] zero-padded, rounded to TF32 (nearest, ties away)."""
    import torch

    k, c = weight.shape[:2]
    w = weight.reshape(k, c, -1).permute(0, 2, 1).contiguous()
    w = torch.nn.functional.pad(w, (0, cq - c)).contiguous()
    bits = w.view(torch.int32)
    return ((bits + 0x1000) & -0x2000).view(torch.float32).contiguous()


class Ours:
    def __init__(self, ext, geom: dict, weight, bias):
        import torch

        self.ext, self.g = ext, geom
        self.w_re = relayout_weight(weight, geom["cq"])
        self.bias = bias if bias is not None else torch.empty(0, device=weight.device)
        self.ints = [geom[f] for f in GEOM_FIELDS]
        self.out_shape = ([geom["n"], geom["k"], geom["oh"], geom["ow"]] if geom["dims"] == 2
                          else [geom["n"], geom["k"], geom["od"], geom["oh"], geom["ow"]])
        sp = geom["d"] * geom["h"] * geom["w"]
        self.x_cl = torch.empty(geom["n"] * sp * geom["cp"], device=weight.device)

    def prepare(self, x):
        import torch

        err = self.ext.prepare_input(x.contiguous(), self.x_cl, self.g["cp"], torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"prepare_input: cudaError {err}")

    def conv(self, name: str, act: int = 1, out=None, x=None):
        """x: the NCHW input (nchw instances); otherwise the channels-last copy prepare() made."""
        import torch

        y = torch.empty(self.out_shape, device=self.x_cl.device) if out is None else out
        err = self.ext.conv_igemm_out(name, self.x_cl if x is None else x, self.w_re, self.bias, y, self.ints, act,
                                      torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"conv_igemm_{name}: error {err}")
        return y

    def __call__(self, x, name: str, act: int = 1, out=None):
        if name.startswith("nchw"):
            return self.conv(name, act, out, x)
        self.prepare(x)
        return self.conv(name, act, out)


# ---- model shapes ------------------------------------------------------------------------------------------

def _load_module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def as_convolution(weight, padding: list[int], dilation: list[int]):
    """A stride-1 transposed convolution as the convolution it equals: conv_transpose(x, w, padding p) =
    conv(x, w', padding d * (k - 1) - p) with w' = w with its two channel axes swapped and its window flipped.
    (weight', padding'), or (weight, None) where some p > d * (k - 1) (the identity needs cropping then)."""
    window = list(weight.shape[2:])
    flipped = weight.transpose(0, 1).flip(list(range(2, weight.dim()))).contiguous()
    new_padding = [d * (k - 1) - p for d, k, p in zip(dilation, window, padding)]
    if any(p < 0 for p in new_padding):
        return weight, None
    return flipped, new_padding


def equivalent_conv(path: Path):
    """(x_shape, weight, bias, padding, dilation) of the model's first stride-1 one-group convolution, a
    transposed one as the equivalent convolution; None when it has none."""
    import torch
    from torch import nn

    module = _load_module(path)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    kinds = (nn.Conv2d, nn.Conv3d, nn.ConvTranspose2d, nn.ConvTranspose3d)
    conv = next((m for m in model.modules() if isinstance(m, kinds)), None)
    if conv is None or any(s != 1 for s in conv.stride) or conv.groups != 1 or conv.padding_mode != "zeros":
        return None
    x_shape = list(module.get_inputs()[0].shape)
    w = conv.weight.detach()
    if isinstance(conv, nn.ConvTranspose2d | nn.ConvTranspose3d):
        w, padding = as_convolution(w, list(conv.padding), list(conv.dilation))
        if padding is None:
            return None
    else:
        padding = list(conv.padding)
    return x_shape, w, (conv.bias.detach() if conv.bias is not None else None), padding, list(conv.dilation)


# ---- measuring ---------------------------------------------------------------------------------------------

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


def rel_err(out, truth) -> float:
    out = out.double()
    if not out.isfinite().all():
        return float("inf")
    rms = truth.pow(2).mean().sqrt().item()
    return (out - truth).abs().max().item() / (rms if rms > 0 else 1.0)


def fconv(dims: int):
    import torch.nn.functional as F

    return F.conv2d if dims == 2 else F.conv3d


def run_shape(job: dict, args) -> dict:
    import torch

    found = equivalent_conv(Path(job["model_path"]))
    x_shape, w, b, padding, dilation = found
    if args.batch:
        x_shape[0] = args.batch
    w, b = w.cuda(), (b.cuda() if b is not None else None)
    g = geometry(x_shape, w.shape[0], list(w.shape[2:]), padding, dilation)
    row = {"models": job["models"], "x_shape": x_shape, "k": g["k"], "window": list(w.shape[2:]),
           "padding": padding, "dilation": dilation, "geometry": g,
           "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32}
    ext = build()
    ours = Ours(ext, g, w, b)
    conv = fconv(g["dims"])
    torch.manual_seed(0)
    x = torch.randn(x_shape, device="cuda")
    out_numel = 1
    for v in ours.out_shape:
        out_numel *= v
    flops = 2.0 * out_numel * g["c"] * g["kd"] * g["kh"] * g["kw"]
    row["gflop"] = flops / 1e9
    row["min_mb"] = 4.0 * (x.numel() + out_numel) / 1e6

    def eager(v):
        return torch.relu(conv(v, w, b, 1, padding, dilation))

    with torch.no_grad():
        cb = min(args.check_batch, g["n"])
        xs = x[:cb].contiguous()
        truth = torch.relu(conv(xs.double(), w.double(), None if b is None else b.double(), 1, padding, dilation))
        small = Ours(ext, {**g, "n": cb}, w, b)
        errs = {}
        for name in job.get("instances", INSTANCES):
            try:
                poison = torch.full(small.out_shape, float("nan"), device="cuda")
                errs[name] = rel_err(small(xs, name, 1, poison), truth)
            except Exception as exc:  # noqa: BLE001
                errs[name] = repr(exc)
        row["err_ours"] = errs
        row["err_eager"] = rel_err(eager(xs), truth)
        cl_format = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        row["err_cudnn_cl"] = rel_err(eager(xs.to(memory_format=cl_format)), truth)
        del truth
        flush = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        ms = {}
        for name in job.get("instances", INSTANCES):
            if isinstance(errs[name], float):
                ms[f"ours_{name}"] = timed(lambda name=name: ours(x, name), args.reps, flush)
        ok_names = [n for n in job.get("instances", INSTANCES) if f"ours_{n}" in ms]
        if ok_names:
            best = min(ok_names, key=lambda n: ms[f"ours_{n}"])
            row["best"] = best
            cl = [n for n in ok_names if n.startswith("cl") and n.endswith("_st")] or [n for n in ok_names if n.startswith("cl")]
            if cl:
                ours.prepare(x)
                ms["ours_cl_conv"] = timed(lambda: ours.conv(cl[0]), args.reps, flush)
                ms["prepare"] = timed(lambda: ours.prepare(x), args.reps, flush)
            ms["ours"] = ms[f"ours_{best}"]
        ms["eager"] = timed(lambda: eager(x), args.reps, flush)
        x_cl = x.to(memory_format=cl_format)
        ms["cudnn_cl"] = timed(lambda: eager(x_cl), args.reps, flush)
        ms["cudnn_conv"] = timed(lambda: conv(x, w, b, 1, padding, dilation), args.reps, flush)
        if not args.no_compile:
            t0 = time.perf_counter()
            compiled = torch.compile(eager)
            compiled(x)
            ms["compile"] = timed(lambda: compiled(x), args.reps, flush)
            row["compile_s"] = time.perf_counter() - t0
        row["ms"] = ms
        if "ours" in ms:
            row["ours_tflops"] = flops / (ms["ours"] * 1e9)
            row["ours_cl_conv_tflops"] = flops / (ms["ours_cl_conv"] * 1e9) if "ours_cl_conv" in ms else None
    best_err = errs.get(row.get("best"), float("inf"))
    row["ours_ok"] = bool(isinstance(best_err, float) and best_err <= max(3 * row["err_eager"], 1e-5))
    return row


ODD_TF32_TOL = 2e-4  # vs the float64 conv of TF32-rounded operands: fp32 accumulation (~1e-6) with room to spare
ODD_CASES = [  # (x_shape, k, window, padding, dilation)
    ([2, 3, 11, 37], 7, [3, 3], [1, 1], [1, 1]),
    ([1, 40, 19, 70], 70, [3, 3], [2, 1], [1, 3]),
    ([3, 64, 33, 65], 130, [3, 3], [0, 0], [1, 1]),
    ([2, 16, 9, 13, 37], 17, [3, 3, 3], [1, 1, 1], [2, 2, 2]),
    ([1, 8, 5, 23, 41], 64, [3, 3, 3], [1, 2, 0], [1, 1, 2]),
    ([2, 33, 7, 9, 35], 29, [4, 4, 4], [2, 0, 1], [1, 1, 1]),
    ([2, 32, 6, 6], 128, [5, 5], [4, 4], [1, 1]),
    # widths that are multiples of 4, so that the nchw instances take them too
    ([2, 3, 11, 36], 7, [3, 3], [1, 1], [1, 1]),
    ([1, 40, 19, 72], 70, [3, 3], [2, 1], [1, 3]),
    ([3, 64, 33, 64], 130, [3, 3], [0, 0], [1, 1]),
    ([2, 16, 9, 13, 36], 17, [3, 3, 3], [1, 1, 1], [2, 2, 2]),
    ([2, 33, 7, 9, 36], 29, [4, 4, 4], [2, 0, 1], [1, 1, 1]),
    ([2, 32, 6, 8], 128, [5, 5], [4, 4], [1, 1]),
    ([2, 20, 5, 40, 12], 96, [1, 3, 3], [0, 1, 1], [1, 1, 1]),
]


def tf32(t):
    """t rounded to TF32 (nearest, ties away), as the kernel's operands are."""
    import torch

    return ((t.float().contiguous().view(torch.int32) + 0x1000) & -0x2000).view(torch.float32)


def run_odd(args, instance: str) -> dict:
    """One instance on the odd cases, against float64 twice: the convolution of the TF32-rounded operands
    (what the kernel computes, up to its fp32 accumulation: a sharp check of its indexing) and the exact one."""
    import torch

    ext = build()
    rows = []
    for x_shape, k, window, padding, dilation in ODD_CASES:
        g = geometry(x_shape, k, window, padding, dilation)
        torch.manual_seed(1)
        x = torch.randn(x_shape, device="cuda")
        w = torch.randn([k, x_shape[1], *window], device="cuda")
        b = torch.randn(k, device="cuda")
        conv = fconv(g["dims"])
        truth = conv(x.double(), w.double(), b.double(), 1, padding, dilation)
        truth_tf32 = conv(tf32(x).double(), tf32(w).double(), b.double(), 1, padding, dilation)
        err_cudnn = rel_err(conv(x, w, b, 1, padding, dilation), truth)
        ours = Ours(ext, g, w, b)
        entry = {"x_shape": x_shape, "k": k, "window": window, "padding": padding, "dilation": dilation,
                 "box": [g["bd"], g["bh"], g["bw"]], "instance": instance, "err_cudnn": err_cudnn}
        try:
            y = ours(x, instance, 0, torch.full(ours.out_shape, float("nan"), device="cuda"))
            torch.cuda.synchronize()
            entry["err"] = rel_err(y, truth)
            entry["err_vs_tf32_operands"] = rel_err(y, truth_tf32)
            entry["ok"] = entry["err_vs_tf32_operands"] <= ODD_TF32_TOL
        except Exception as exc:  # noqa: BLE001
            # error 1004: a geometry the instance does not take (nchw: W not a multiple of 4)
            entry.update(error=repr(exc), ok="error 1004" in repr(exc) and instance.startswith("nchw"))
        rows.append(entry)
    return {"odd": rows, "ours_ok": all(r["ok"] for r in rows)}


# ---- driver ------------------------------------------------------------------------------------------------

def _worker(args) -> int:
    job = json.loads(Path(args.worker).read_text())
    try:
        result = run_odd(args, job["instance"]) if job.get("odd") else run_shape(job, args)
    except Exception as exc:  # noqa: BLE001
        import traceback

        result = {"models": job.get("models"), "error": repr(exc), "traceback": traceback.format_exc()[-3000:]}
    Path(args.worker_out).write_text(json.dumps(result, indent=1))
    return 0


def _spawn(job: dict, args, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        job_path, out_path = Path(tmp) / "job.json", Path(tmp) / "out.json"
        job_path.write_text(json.dumps(job))
        cmd = [sys.executable, __file__, "--worker", str(job_path), "--worker-out", str(out_path),
               "--reps", str(args.reps), "--check-batch", str(args.check_batch)]
        if args.batch:
            cmd += ["--batch", str(args.batch)]
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
        return f"[{models}] FAILED: {r['error']} {r.get('stderr', '')[-400:]}"
    ms = r["ms"]
    vs = lambda key: f"{ms[key] / ms['ours']:.2f}x" if key in ms and "ours" in ms else "-"  # noqa: E731
    errs = " ".join(f"{n}={v:.1e}" if isinstance(v, float) else f"{n}=ERR" for n, v in r["err_ours"].items())
    times = " ".join(f"{k}={v:.3f}" for k, v in ms.items())
    return (f"[{models}] x{r['x_shape']} k={r['k']} w={r['window']} p={r['padding']}: {times} | "
            f"vs eager {vs('eager')} vs compile {vs('compile')} | {r.get('ours_tflops', 0):.0f} TFLOP/s "
            f"(cl conv alone {r.get('ours_cl_conv_tflops') or 0:.0f}) | best {r.get('best')} | err {errs} eager {r['err_eager']:.1e} "
            f"cl {r['err_cudnn_cl']:.1e} {'ok' if r['ours_ok'] else 'WRONG'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--check-batch", type=int, default=2)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--no-odd", action="store_true")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--budget", type=float, default=400.0, help="seconds for the whole run")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return _worker(args)

    import torch

    t0 = time.perf_counter()
    meta = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}
    results = {"meta": meta, "odd": None, "shapes": []}

    def save():
        if args.out:
            args.out.write_text(json.dumps(results, indent=1))

    print("building ...", flush=True)
    build()
    print(f"built in {time.perf_counter() - t0:.0f} s", flush=True)
    passed = list(INSTANCES)
    if not args.no_odd:  # each instance in a process of its own: one that hangs or faults costs only itself
        results["odd"] = {}
        for name in INSTANCES:
            odd = _spawn({"odd": True, "instance": name}, args, 45.0)
            results["odd"][name] = odd
            for r in odd.get("odd", []):
                print(f"odd {r['x_shape']} k={r['k']} w={r['window']} p={r['padding']} d={r['dilation']} "
                      f"box={r['box']} {name}: err {r.get('err', r.get('error'))} vs tf32 operands "
                      f"{r.get('err_vs_tf32_operands')} cudnn {r['err_cudnn']:.1e} {'ok' if r['ok'] else 'WRONG'}",
                      flush=True)
            if "error" in odd or not odd.get("ours_ok"):
                print(f"odd {name} FAILED: {odd.get('error', 'wrong results')} {odd.get('stderr', '')[-800:]}",
                      flush=True)
                passed.remove(name)
            save()
        results["instances_timed"] = passed
    jobs: dict[str, dict] = {}
    for name in args.models:
        path = next((d / f"{name}.py" for d in (KERNELBENCH, DEV) if (d / f"{name}.py").exists()), None)
        if path is None:
            print(f"[{name}] not found", flush=True)
            continue
        found = equivalent_conv(path)
        if found is None:
            print(f"[{name}] no stride-1 one-group convolution", flush=True)
            continue
        x_shape, w, _, padding, dilation = found
        key = json.dumps([x_shape, list(w.shape), padding, dilation])
        jobs.setdefault(key, {"model_path": str(path), "models": [], "instances": passed})["models"].append(name)
    for job in jobs.values():
        left = args.budget - (time.perf_counter() - t0)
        if left < 20:
            results["shapes"].append({"models": job["models"], "error": "skipped: budget spent"})
            continue
        r = _spawn(job, args, min(args.timeout, left))
        results["shapes"].append(r)
        print(_line(r), flush=True)
        save()
    meta["wall_s"] = time.perf_counter() - t0
    save()
    bad = [r for r in results["shapes"] if "error" in r or not r.get("ours_ok")]
    odd_ok = args.no_odd or passed == list(INSTANCES)
    return 0 if odd_ok and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
