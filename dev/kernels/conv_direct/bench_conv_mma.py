"""The direct convolution on tensor cores in 3xTF32 (`conv_mma.cuh`, lab) against the FFMA direct kernel
(`direct.cuh`, the product's tiling) and cuDNN (eager, NCHW), on the fp32-class convolutions of the problem models.

    .venv/bin/python dev/kernels/conv_direct/bench_conv_mma.py --out $OUT/conv_mma.json

Shapes: every convolution of bench/results/2026-11-27c_h100/conv_times.json that eager runs exact-fp32 and that has
an instance here (C, window, channels). First odd cases (stride 2, padding, dilation, channel tails, odd sizes)
against float64; then per shape: each kernel with a bias epilogue, error vs float64 (max |err| / RMS of the truth),
and the median of --reps CUDA-event times after an L2 flush. Exit status 1 when one of ours is wrong.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "dev" / "kernels"))
import labtools  # noqa: E402

from fuseforge.families.conv import tiling  # noqa: E402

CONV = ROOT / "fuseforge" / "families" / "conv"
HERE = Path(__file__).resolve().parent
TIMES = ROOT / "bench" / "results" / "2026-11-27c_h100" / "conv_times.json"
# (name, C, KD, KH, KW, output channels): the instances this bench builds
INSTANCES = [("c8_3x3_k64", 8, 1, 3, 3, 64), ("c3_3x3x3_k16", 3, 3, 3, 3, 16), ("c3_3x3x3_k24", 3, 3, 3, 3, 24),
             ("c3_4x4x4_k16", 3, 4, 4, 4, 16)]
ODD_TOL = 1e-5


def _source() -> tuple[str, list[str]]:
    parts = [(CONV / "direct.cuh").read_text(), (HERE / "conv_mma.cuh").read_text(),
             "struct EpiBias { const float* b; __device__ float operator()(float acc, int k, int64_t) const "
             "{ return acc + b[k]; } };"]
    names = []
    for name, c, kd, kh, kw, k_out in INSTANCES:
        nt = (min(k_out, 64) + 7) // 8
        t = tiling.choose(c, k_out, (kd, kh, kw), (1, 1, 1), (1, 1, 1), 64)
        unit = "true"
        parts.append(f"""
extern "C" int mma_{name}(const float* x, const float* w, float* y, const int* q, const float* b, void* s) {{
    ff_conv_direct::Geometry g{{q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8], q[9], q[10], q[11], q[12], q[13],
                               q[14], q[15], q[16], q[17]}};
    return (int)ff_conv_mma::launch<{c}, {kd}, {kh}, {kw}, {nt}, 2>(x, w, y, g, EpiBias{{b}}, (cudaStream_t)s);
}}
extern "C" int mma1_{name}(const float* x, const float* w, float* y, const int* q, const float* b, void* s) {{
    ff_conv_direct::Geometry g{{q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8], q[9], q[10], q[11], q[12], q[13],
                               q[14], q[15], q[16], q[17]}};
    return (int)ff_conv_mma::launch<{c}, {kd}, {kh}, {kw}, {nt}, 1>(x, w, y, g, EpiBias{{b}}, (cudaStream_t)s);
}}
extern "C" int ffma_{name}(const float* x, const float* w, float* y, const int* q, const float* b, void* s, int unit) {{
    ff_conv_direct::Geometry g{{q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8], q[9], q[10], q[11], q[12], q[13],
                               q[14], q[15], q[16], q[17]}};
    if (unit) return (int)ff_conv_direct::launch<{c}, {kd}, {kh}, {kw}, {t.kpt}, {t.wk}, {t.wh}, {t.ph}, {unit}>(
        x, w, y, g, EpiBias{{b}}, (cudaStream_t)s);
    return (int)ff_conv_direct::launch<{c}, {kd}, {kh}, {kw}, {t.kpt}, {t.wk}, {t.wh}, {t.ph}, false>(
        x, w, y, g, EpiBias{{b}}, (cudaStream_t)s);
}}""")
        names.append(name)
    return "\n".join(parts), names


def build():
    from torch.utils.cpp_extension import load_inline
    cuda, names = _source()
    decls, dispatch = [], []
    for n in names:
        decls.append(f'extern "C" int mma_{n}(const float*, const float*, float*, const int*, const float*, void*);')
        decls.append(f'extern "C" int mma1_{n}(const float*, const float*, float*, const int*, const float*, void*);')
        decls.append(f'extern "C" int ffma_{n}(const float*, const float*, float*, const int*, const float*, void*, int);')
        args = "x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>(), qi.data(), b.data_ptr<float>(), " \
               "reinterpret_cast<void*>(stream)"
        dispatch.append(f'if (which == "mma_{n}") err = mma_{n}({args});')
        dispatch.append(f'if (which == "mma1_{n}") err = mma1_{n}({args});')
        dispatch.append(f'if (which == "ffma_{n}") err = ffma_{n}({args}, 1);')
        dispatch.append(f'if (which == "ffma_rows_{n}") err = ffma_{n}({args}, 0);')
    binding = labtools.conv_binding(decls, dispatch)
    return load_inline(name="bench_conv_mma", cpp_sources=[binding], cuda_sources=[cuda], functions=None,
                       extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a"], verbose=False)


def _geometry(x_shape, w_shape, stride, padding, dilation):
    dims = len(x_shape) - 2
    pad3 = lambda v: [1] * (3 - dims) + list(v)  # noqa: E731
    zero3 = lambda v: [0] * (3 - dims) + list(v)  # noqa: E731
    d = x_shape[2] if dims == 3 else 1
    h, w = x_shape[-2], x_shape[-1]
    win = pad3(w_shape[2:])
    s, p, dl = pad3(stride), zero3(padding), pad3(dilation)
    ext = lambda n, k, s_, p_, d_: (n + 2 * p_ - d_ * (k - 1) - 1) // s_ + 1  # noqa: E731
    od, oh, ow = ext(d, win[0], s[0], p[0], dl[0]), ext(h, win[1], s[1], p[1], dl[1]), ext(w, win[2], s[2], p[2], dl[2])
    q = [x_shape[0], x_shape[1], d, h, w, w_shape[0], od, oh, ow, *s, *p, *dl]
    out = [x_shape[0], w_shape[0], *([od] if dims == 3 else []), oh, ow]
    return q, out


def _instance(c, window, k_out):
    win = ([1] * (3 - len(window))) + list(window)
    for name, ic, kd, kh, kw, ik in INSTANCES:
        if (ic, kd, kh, kw) == (c, *win) and (ik == k_out or (ik == 64 and k_out > 56)):
            return name
    for name, ic, kd, kh, kw, ik in INSTANCES:  # another channel count: the instance of the same window
        if (ic, kd, kh, kw) == (c, *win):
            return name
    return None


def _conv(x, w, b, stride, padding, dilation):
    f = F.conv2d if x.dim() == 4 else F.conv3d
    return f(x, w, b, stride=stride, padding=padding, dilation=dilation)


def _err(got, truth) -> float:
    return ((got.double() - truth).abs().max() / truth.pow(2).mean().sqrt()).item()


def timed(fn, reps, flush):
    times = []
    for _ in range(reps):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


ODD = [  # (instance, x shape, out channels, stride, padding, dilation)
    ("c8_3x3_k64", [2, 8, 19, 37], 64, [1, 1], [0, 0], [1, 1]),
    ("c8_3x3_k64", [3, 8, 23, 41], 70, [2, 2], [1, 1], [1, 1]),
    ("c8_3x3_k64", [1, 8, 17, 33], 13, [1, 2], [2, 1], [2, 1]),
    ("c8_3x3_k64", [2, 8, 5, 7], 64, [1, 1], [1, 1], [1, 1]),
    ("c3_3x3x3_k16", [2, 3, 7, 11, 35], 16, [1, 1, 1], [0, 0, 0], [1, 1, 1]),
    ("c3_3x3x3_k16", [1, 3, 9, 13, 19], 21, [2, 1, 2], [1, 1, 0], [1, 2, 1]),
    ("c3_3x3x3_k24", [2, 3, 6, 10, 40], 24, [1, 1, 1], [1, 0, 1], [1, 1, 1]),
    ("c3_4x4x4_k16", [1, 3, 8, 12, 37], 16, [1, 1, 1], [0, 0, 0], [1, 1, 1]),
    ("c3_4x4x4_k16", [2, 3, 9, 9, 9], 5, [2, 2, 2], [1, 1, 1], [1, 1, 1]),
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default=None)
    ap.add_argument("--models", nargs="*", default=None, help="only the shapes of models whose name holds one of these")
    ap.add_argument("--no-odd", action="store_true")
    args = ap.parse_args()
    ext = build()
    stream = torch.cuda.current_stream().cuda_stream
    record, bad = {"environment": {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__},
                   "odd": [], "shapes": []}, False
    for name, xs, k_out, stride, padding, dilation in ([] if args.no_odd else ODD):
        torch.manual_seed(len(record["odd"]))
        inst = next(i for i in INSTANCES if i[0] == name)
        x = torch.randn(xs, device="cuda")
        w = torch.randn([k_out, inst[1], *([inst[2]] if len(xs) == 5 else []), inst[3], inst[4]], device="cuda")
        b = torch.randn(k_out, device="cuda")
        truth = _conv(x.double(), w.double(), b.double(), stride, padding, dilation)
        q, out = _geometry(xs, list(w.shape), stride, padding, dilation)
        row = {"instance": name, "x": xs, "k": k_out, "stride": stride, "padding": padding, "dilation": dilation}
        for kind in ("mma", "mma1", "ffma", "ffma_rows"):
            try:
                y = ext.run(f"{kind}_{name}", x, w, b, q, out, stream)
                torch.cuda.synchronize()
                row[f"err_{kind}"] = _err(y, truth) if not torch.isnan(y).any() else float("nan")
            except RuntimeError as exc:  # such as shared memory the tile needs beyond what a block has
                row[f"err_{kind}"], row[f"error_{kind}"] = float("nan"), str(exc).splitlines()[0][:200]
        ok = row["err_mma"] < ODD_TOL and row["err_mma1"] < ODD_TOL or "error_mma" in row
        bad |= not ok
        record["odd"].append(row)
        print(f"odd {name} x{xs} k={k_out} s{stride} p{padding} d{dilation}: mma {row['err_mma']:.1e} "
              f"mma1 {row['err_mma1']:.1e} ffma {row['err_ffma']:.1e} {'ok' if ok else 'WRONG'} "
              f"{row.get('error_mma', '')}", flush=True)
    flush = torch.empty(64 * 1024 * 1024 // 4, device="cuda")
    seen = set()
    for conv in json.loads(TIMES.read_text())["convolutions"]:
        if conv["class"] != "fp32" or conv["transposed"] or conv["groups"] != 1:
            continue
        xs, ws = conv["input_shape"], conv["weight_shape"]
        name = _instance(ws[1], ws[2:], ws[0])
        key = (tuple(xs), tuple(ws))
        if name is None or key in seen or (args.models and not any(m in conv["model"] for m in args.models)):
            continue
        seen.add(key)
        torch.manual_seed(0)
        x = torch.randn(xs, device="cuda")
        w = torch.randn(ws, device="cuda") * (1.0 / (ws[1] * ws[2] * ws[3]) ** 0.5)
        b = torch.randn(ws[0], device="cuda")
        stride, padding, dilation = conv["stride"], conv["padding"], conv["dilation"]
        q, out = _geometry(xs, ws, stride, padding, dilation)
        n1 = max(1, xs[0] // 16)  # float64 truth on a slice of the batch
        truth = _conv(x[:n1].double(), w.double(), b.double(), stride, padding, dilation)
        row = {"model": conv["model"], "x": xs, "w": ws, "instance": name}
        fns = {"mma": lambda: ext.run(f"mma_{name}", x, w, b, q, out, stream),
               "mma1": lambda: ext.run(f"mma1_{name}", x, w, b, q, out, stream),
               "ffma": lambda: ext.run(f"ffma_{name}", x, w, b, q, out, stream),
               "cudnn_bias": lambda: _conv(x, w, b, stride, padding, dilation),
               "cudnn_no_bias": lambda: _conv(x, w, None, stride, padding, dilation)}
        for kind, fn in fns.items():
            y = fn()
            torch.cuda.synchronize()
            if kind != "cudnn_no_bias":
                row[f"err_{kind}"] = _err(y[:n1], truth)
            row[f"ms_{kind}"] = timed(fn, args.reps, flush)
            del y
        flops = 2 * out[0] * ws[0] * (out[2] * out[3] * (out[4] if len(out) == 5 else 1)) * ws[1] * \
            (ws[2] * ws[3] * (ws[4] if len(ws) == 5 else 1))
        row["tflops_mma"] = flops / row["ms_mma"] / 1e9
        bad |= not row["err_mma"] < 1e-4
        record["shapes"].append(row)
        print(f"{conv['model'][:36]} x{xs} -> {ws[0]}: mma {row['ms_mma']:.3f} ms ({row['tflops_mma']:.1f} TF/s, err "
              f"{row['err_mma']:.1e}) mma1 {row['ms_mma1']:.3f} ffma {row['ms_ffma']:.3f} ({row['err_ffma']:.1e}) cudnn {row['ms_cudnn_bias']:.3f} "
              f"/ no bias {row['ms_cudnn_no_bias']:.3f} ({row['err_cudnn_bias']:.1e})", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
