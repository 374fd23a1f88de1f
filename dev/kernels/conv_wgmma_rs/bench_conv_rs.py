"""Lab bench of `conv_rs.cuh` (the few-channel direct convolution on tensor cores, 3xTF32, wgmma with A from
registers) against the FFMA direct kernel (`families/conv/direct.cuh` at the product's tiling) and cuDNN (exact fp32:
eager's class on these shapes; and PyTorch's default flags), each with a bias epilogue.

    .venv/bin/python dev/kernels/conv_wgmma_rs/bench_conv_rs.py --out $OUT/conv_rs.json

First odd cases against float64 (padding, channel tails past and below 64, 3 and 16 input channels, odd sizes), then
the problem models' 8-channel 2-D convolutions: error vs float64 on the first images (max |error| / RMS of the truth)
and the median of --reps CUDA-event times after an L2 flush (`labtools.timed`, three warm-up calls). Exit status 1 when one of ours is wrong (error > 1e-5
or a failed launch). `--compile-only DIR` writes the CUDA source there and stops (CI compiles it with nvcc).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "dev" / "kernels"))
import labtools  # noqa: E402

from fuseforge.families.conv import tiling  # noqa: E402

CONV = ROOT / "fuseforge" / "families" / "conv"
HERE = Path(__file__).resolve().parent
INSTANCES = [("c8_3x3", 8, 3, 3), ("c3_3x3", 3, 3, 3), ("c16_3x3", 16, 3, 3)]  # (name, C, KH, KW)
# the kernel's variants: (pipelined, fresh partials). rs: each kernel row's wgmmas waited for before the next row's
# fragments load, a fresh partial a row; rsp: the next row's fragments loaded while this row's wgmmas run (two
# register sets), fresh partials; rspa: the same, the products accumulated straight into the sum (no partials)
VARIANTS = {"rs": (False, True), "rsp": (True, True), "rspa": (True, False)}


def variants_of(c: int) -> tuple[str, ...]:
    """The variants built for C input channels: the pipelined ones at one k8 step a tap only (at 16 channels their two
    register sets spill, or ptxas serialises the wgmmas)."""
    return tuple(VARIANTS) if c <= 8 else ("rs",)
ODD = [  # (instance, x shape, out channels, padding)
    ("c8_3x3", [2, 8, 19, 37], 64, [0, 0]),
    ("c8_3x3", [3, 8, 23, 41], 70, [1, 1]),
    ("c8_3x3", [1, 8, 17, 33], 13, [2, 1]),
    ("c8_3x3", [2, 8, 5, 7], 64, [1, 1]),
    ("c3_3x3", [2, 3, 19, 37], 16, [1, 1]),
    ("c16_3x3", [2, 16, 13, 35], 40, [0, 2]),
]
SHAPES = [("57, 73, 85", [128, 8, 128, 128], 64), ("67, 87", [128, 8, 256, 256], 64),
          ("65", [128, 8, 384, 384], 64)]
ODD_TOL = 1e-5


def source() -> str:
    parts = [(CONV / "igemm_ptx.cuh").read_text(), (CONV / "direct.cuh").read_text(), (HERE / "conv_rs.cuh").read_text(),
             "struct EpiBias { const float* b; __device__ float operator()(float acc, int k, int64_t) const "
             "{ return acc + b[k]; } };"]
    for name, c, kh, kw in INSTANCES:
        t = tiling.choose(c, 64, (1, kh, kw), (1, 1, 1), (1, 1, 1), 64)
        for variant in variants_of(c):
            pipelined, fresh = VARIANTS[variant]
            targs = f"{c}, {kh}, {kw}, EpiBias, {'true' if pipelined else 'false'}, {'true' if fresh else 'false'}"
            parts.append(f"""
extern "C" int {variant}_{name}(const float* x, const float* w, float* y, const int* q, const float* b, void* s) {{
    ff_conv_rs::Geometry g{{q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8]}};
    return ff_conv_rs::launch<{targs}>(x, w, y, g, EpiBias{{b}}, (cudaStream_t)s);
}}
extern "C" int occ_{variant}_{name}() {{ return ff_conv_rs::blocks_per_sm<{targs}>(); }}""")
        parts.append(f"""
extern "C" int ffma_{name}(const float* x, const float* w, float* y, const int* q, const float* b, void* s) {{
    ff_conv_direct::Geometry g{{q[0], q[1], 1, q[2], q[3], q[4], 1, q[5], q[6], 1, 1, 1, 0, q[7], q[8], 1, 1, 1}};
    return (int)ff_conv_direct::launch<{c}, 1, {kh}, {kw}, {t.kpt}, {t.wk}, {t.wh}, {t.ph}, true>(
        x, w, y, g, EpiBias{{b}}, (cudaStream_t)s);
}}""")
    return "\n".join(parts)


def build():
    from torch.utils.cpp_extension import load_inline
    decls, dispatch, occupancy = [], [], []
    args = ("x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>(), qi.data(), b.data_ptr<float>(), "
            "reinterpret_cast<void*>(stream)")
    for name, c, *_ in INSTANCES:
        for kind in (*variants_of(c), "ffma"):
            decls.append(f'extern "C" int {kind}_{name}(const float*, const float*, float*, const int*, const float*, '
                         'void*);')
            dispatch.append(f'if (which == "{kind}_{name}") err = {kind}_{name}({args});')
        for kind in variants_of(c):
            decls.append(f'extern "C" int occ_{kind}_{name}();')
            occupancy.append(f'if (which == "{kind}_{name}") return occ_{kind}_{name}();')
    occupancy_fn = "int blocks_per_sm(const std::string& which) {\n    " + "\n    ".join(occupancy) + "\n    return -1;\n}"
    binding = labtools.conv_binding(decls, dispatch, occupancy_fn, 'm.def("blocks_per_sm", &blocks_per_sm);')
    return load_inline(name="bench_conv_rs", cpp_sources=[binding], cuda_sources=[source()], functions=None,
                       extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas=-v"], verbose=True)


def geometry(xs, k, padding):
    oh, ow = xs[2] + 2 * padding[0] - 2, xs[3] + 2 * padding[1] - 2
    return [xs[0], xs[1], xs[2], xs[3], k, oh, ow, padding[0], padding[1]], [xs[0], k, oh, ow]


def measure(ext, stream, timed, err, models, xs, k) -> dict:
    """One problem shape: each kernel's error vs float64 on the first two images and its median time."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    x = torch.randn(xs, device="cuda")
    w = torch.randn([k, xs[1], 3, 3], device="cuda") * (1.0 / (xs[1] * 9) ** 0.5)
    b = torch.randn(k, device="cuda")
    q, out = geometry(xs, k, [0, 0])
    truth = F.conv2d(x[:2].double(), w.double(), b.double())
    row = {"models": models, "x": xs, "k": k}

    def cudnn(tf32):
        torch.backends.cudnn.allow_tf32 = tf32
        return F.conv2d(x, w, b)

    fns = {kind: (lambda kind=kind: ext.run(f"{kind}_c8_3x3", x, w, b, q, out, stream)) for kind in (*VARIANTS, "ffma")}
    fns |= {"cudnn_fp32": lambda: cudnn(False), "cudnn_default": lambda: cudnn(True)}
    for kind, fn in fns.items():
        y = fn()
        torch.cuda.synchronize()
        row[f"err_{kind}"] = err(y[:2], truth)
        row[f"ms_{kind}"] = timed(fn)
        del y
    torch.backends.cudnn.allow_tf32 = True
    for kind in VARIANTS:
        row[f"tflops_{kind}"] = 2 * out[0] * k * out[2] * out[3] * xs[1] * 9 / row[f"ms_{kind}"] / 1e9
    return row


def main() -> int:
    import torch
    import torch.nn.functional as F

    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--out", default=None)
    ap.add_argument("--compile-only", default=None)
    args = ap.parse_args()
    if args.compile_only:
        Path(args.compile_only, "conv_rs_lab.cu").write_text(source())
        return 0
    ext = build()
    stream = torch.cuda.current_stream().cuda_stream
    record, bad = {"environment": {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__},
                   "odd": [], "shapes": []}, False

    def err(got, truth):
        return ((got.double() - truth).abs().max() / truth.pow(2).mean().sqrt()).item()

    for name, xs, k, padding in ODD:
        torch.manual_seed(len(record["odd"]))
        x, w, b = (torch.randn(xs, device="cuda"), torch.randn([k, xs[1], 3, 3], device="cuda"),
                   torch.randn(k, device="cuda"))
        truth = F.conv2d(x.double(), w.double(), b.double(), padding=padding)
        q, out = geometry(xs, k, padding)
        row = {"instance": name, "x": xs, "k": k, "padding": padding}
        kinds = variants_of(xs[1])
        for kind in (*kinds, "ffma"):
            try:
                y = ext.run(f"{kind}_{name}", x, w, b, q, out, stream)
                torch.cuda.synchronize()
                row[f"err_{kind}"] = err(y, truth) if not torch.isnan(y).any() else float("nan")
            except RuntimeError as exc:
                row[f"err_{kind}"], row[f"error_{kind}"] = float("nan"), str(exc).splitlines()[0][:200]
        ok = all(row[f"err_{v}"] < ODD_TOL for v in kinds)
        bad |= not ok
        record["odd"].append(row)
        errors = " ".join(f"{v} {row[f'err_{v}']:.1e}" for v in (*kinds, "ffma"))
        print(f"odd {name} x{xs} k={k} p{padding}: {errors} {'ok' if ok else 'WRONG'} "
              f"{' '.join(row.get(f'error_{v}', '') for v in kinds)}", flush=True)
    record["blocks_per_sm"] = {v: ext.blocks_per_sm(f"{v}_c8_3x3") for v in VARIANTS}
    print(f"blocks an SM (8 channels, 3x3): {record['blocks_per_sm']}", flush=True)
    flush = torch.empty(64 * 1024 * 1024 // 4, device="cuda")

    def timed(fn):
        return labtools.timed(fn, args.reps, flush)

    for models, xs, k in SHAPES:
        row = measure(ext, stream, timed, err, models, xs, k)
        bad |= not all(row[f"err_{v}"] < 1e-5 for v in VARIANTS)
        record["shapes"].append(row)
        ours = " ".join(f"{v} {row[f'ms_{v}']:.3f} ({row[f'tflops_{v}']:.1f} TF/s, {row[f'err_{v}']:.1e})"
                        for v in VARIANTS)
        print(f"{models} x{xs} -> {k}: {ours}; ffma {row['ms_ffma']:.3f} ({row['err_ffma']:.1e}) cudnn fp32 "
              f"{row['ms_cudnn_fp32']:.3f} ({row['err_cudnn_fp32']:.1e}) default {row['ms_cudnn_default']:.3f} "
              f"({row['err_cudnn_default']:.1e})", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
