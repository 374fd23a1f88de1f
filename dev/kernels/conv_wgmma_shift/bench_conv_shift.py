"""Lab bench of `conv_shift.cuh` (the few-channel stride-1 convolution on tensor cores, 3xTF32, each tap a shifted
descriptor over one shared-memory band) against the FFMA direct kernel (`families/conv/direct.cuh` at the product's
tiling) and cuDNN (exact fp32, eager's class on these shapes; and PyTorch's default flags), each with a bias
epilogue.

    .venv/bin/python dev/kernels/conv_wgmma_shift/bench_conv_shift.py --out $OUT/conv_shift.json

First odd cases against float64 (padding, dilation, channel tails past and below 64, 3 and 16 input channels, a 5x5
window, odd sizes, bands that run past the image), then the problem models' 8-channel 2-D convolutions at each band
height that fits: error vs float64 on the first images (max |error| / RMS of the truth) and the median of --reps
CUDA-event times after an L2 flush (`labtools.timed`). Variants (`VARIANTS`): `shift` (every tap's small products,
then every tap's big one, into one sum), `shiftp` (a fresh partial a kernel row), `pipe` (two accumulator sets: a
chunk's epilogue overlaps the next chunk's wgmmas), `_ahead` (the next band's copy in flight), `_sum` (the spatial-sum
form), `_stage` (stores through a shared-memory stage, 256 contiguous bytes a warp's store), `2` (two warpgroups a
block sharing the band); each at 2 and 4 chunks of 128 positions a band (8 was slower everywhere at 146bcb2). Exit status 1 when one of ours is wrong (error > 1e-5 or a failed launch).
`--compile-only DIR` writes the CUDA source there and stops (CI compiles it with nvcc).
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

from fuseforge.cuda_sources import paste_include  # noqa: E402
from fuseforge.families.conv import tiling  # noqa: E402

CONV = ROOT / "fuseforge" / "families" / "conv"
HERE = Path(__file__).resolve().parent
INSTANCES = [("c8_3x3", 8, 3, 3), ("c3_3x3", 3, 3, 3), ("c16_3x3", 16, 3, 3), ("c8_5x5", 8, 5, 5)]  # (name, C, KH, KW)
# name: (fresh partial a kernel row, two accumulator sets, the next band's copy in flight, what the epilogue does:
# 0 stores from the fragment, 1 stores through the warp's shared-memory stage, 2 spatial sums only; warpgroups a block)
VARIANTS = {"shift": (False, False, False, 0, 1), "shiftp": (True, False, False, 0, 1),
            "shiftp_ahead": (True, False, True, 0, 1), "pipe": (False, True, False, 0, 1),
            "pipe_ahead": (False, True, True, 0, 1), "pipe_ahead_sum": (False, True, True, 2, 1),
            "shift_stage": (False, False, False, 1, 1), "pipe_stage": (False, True, False, 1, 1),
            "pipe_ahead_stage": (False, True, True, 1, 1), "shift2_stage": (False, False, False, 1, 2),
            "pipe2_stage": (False, True, False, 1, 2), "pipe2_ahead_sum": (False, True, True, 2, 2)}
BANDS = {"c8_3x3": (2, 4)}  # chunks of 128 positions a band (a template constant); 2 for the other instances


def is_sum(variant: str) -> bool:
    return VARIANTS[variant][3] == 2


def bands_of(instance: str, variant: str = "shift") -> tuple[int, ...]:
    """The band sizes built: a two-warpgroup pipelined variant needs two chunks a warpgroup."""
    _, pipe, _, _, wgs = VARIANTS[variant]
    return tuple(b for b in BANDS.get(instance, (2, 4) if wgs * (2 if pipe else 1) > 2 else (2,))
                 if b % (wgs * (2 if pipe else 1)) == 0)


def variants_of(instance: str) -> tuple[str, ...]:
    """The variants built for an instance: at 25 taps all but the plain staged one spill (ptxas, 255 registers)."""
    return ("shift_stage",) if instance.endswith("5x5") else tuple(VARIANTS)


def kinds_of(instance: str) -> list[str]:
    """Every launcher of an instance: variant and band size."""
    return [f"{v}_{instance}_b{chunks}" for v in variants_of(instance) for chunks in bands_of(instance, v)]


ODD = [  # (instance, x shape, out channels, padding, dilation)
    ("c8_3x3", [2, 8, 19, 37], 64, [0, 0], [1, 1]),
    ("c8_3x3", [3, 8, 23, 41], 70, [1, 1], [1, 1]),
    ("c8_3x3", [1, 8, 17, 33], 13, [2, 1], [1, 1]),
    ("c8_3x3", [2, 8, 5, 7], 64, [1, 1], [1, 1]),
    ("c8_3x3", [2, 8, 21, 30], 64, [2, 2], [2, 2]),
    ("c3_3x3", [2, 3, 19, 37], 16, [1, 1], [1, 1]),
    ("c16_3x3", [2, 16, 13, 35], 40, [0, 2], [1, 1]),
    ("c8_5x5", [2, 8, 20, 29], 64, [2, 2], [1, 1]),
]
SHAPES = [("57, 73, 85", [128, 8, 128, 128], 64), ("67, 87", [128, 8, 256, 256], 64),
          ("65", [128, 8, 384, 384], 64)]
TOL = 1e-5


def source() -> str:
    product = paste_include((CONV / "shift.cuh").read_text(), "igemm_ptx.cuh", "fuseforge.families.conv", "")
    parts = [(CONV / "direct.cuh").read_text(), product, (HERE / "conv_shift.cuh").read_text(),
             "struct EpiBias { const float* b; __device__ float operator()(float acc, int k, int64_t) const "
             "{ return acc + b[k]; } };"]
    for name, c, kh, kw in INSTANCES:
        t = tiling.choose(c, 64, (1, kh, kw), (1, 1, 1), (1, 1, 1), 64)
        for variant in variants_of(name):
            flags = VARIANTS[variant]
            for chunks in bands_of(name, variant):
                targs = (f"{c}, {kh}, {kw}, {chunks}, EpiBias, " + ", ".join("true" if f else "false" for f in flags[:3])
                         + f", {flags[3]}, {flags[4]}")
                parts.append(f"""
extern "C" int {variant}_{name}_b{chunks}(const float* x, const float* w, float* y, const int* q, const float* b, void* s) {{
    ff_conv_shift_lab::Geometry g{{q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8], q[9], q[10]}};
    return ff_conv_shift_lab::launch<{targs}>(x, w, y, g, EpiBias{{b}}, (cudaStream_t)s);
}}
extern "C" int occ_{variant}_{name}_b{chunks}(const int* q) {{
    ff_conv_shift_lab::Geometry g{{q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8], q[9], q[10]}};
    return ff_conv_shift_lab::blocks_per_sm<{targs}>(g);
}}""")
        parts.append(f"""
extern "C" int ffma_{name}(const float* x, const float* w, float* y, const int* q, const float* b, void* s) {{
    ff_conv_direct::Geometry g{{q[0], q[1], 1, q[2], q[3], q[4], 1, q[5], q[6], 1, 1, 1, 0, q[7], q[8], 1, q[9], q[10]}};
    return (int)ff_conv_direct::launch<{c}, 1, {kh}, {kw}, {t.kpt}, {t.wk}, {t.wh}, {t.ph}, true>(
        x, w, y, g, EpiBias{{b}}, (cudaStream_t)s);
}}""")
    return "\n".join(parts)


def build():
    from torch.utils.cpp_extension import load_inline
    decls, dispatch, occupancy = [], [], []
    args = ("x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>(), qi.data(), b.data_ptr<float>(), "
            "reinterpret_cast<void*>(stream)")
    for name, *_ in INSTANCES:
        kinds = kinds_of(name)
        for kind in (*kinds, f"ffma_{name}"):
            decls.append(f'extern "C" int {kind}(const float*, const float*, float*, const int*, const float*, '
                         'void*);')
            dispatch.append(f'if (which == "{kind}") err = {kind}({args});')
        for kind in kinds:
            decls.append(f'extern "C" int occ_{kind}(const int*);')
            occupancy.append(f'if (which == "{kind}") return occ_{kind}(qi.data());')
    occupancy_fn = ("int blocks_per_sm(const std::string& which, std::vector<int64_t> q) {\n"
                    "    std::vector<int> qi(q.begin(), q.end());\n    " + "\n    ".join(occupancy) +
                    "\n    return -1;\n}")
    binding = labtools.conv_binding(decls, dispatch, occupancy_fn, 'm.def("blocks_per_sm", &blocks_per_sm);')
    return load_inline(name="bench_conv_shift", cpp_sources=[binding], cuda_sources=[source()], functions=None,
                       extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas=-v"], verbose=True)


def geometry(xs, k, kernel, padding, dilation):
    """The launchers' int vector (n, c, h, w, k, oh, ow, ph, pw, dh, dw) and the output's sizes."""
    oh = xs[2] + 2 * padding[0] - dilation[0] * (kernel[0] - 1)
    ow = xs[3] + 2 * padding[1] - dilation[1] * (kernel[1] - 1)
    return [*xs, k, oh, ow, *padding, *dilation], [xs[0], k, oh, ow]


def sums_of(y):
    """A spatial-sum variant's result: the first N x K values of its output, per (image, channel)."""
    return y.reshape(-1)[:y.shape[0] * y.shape[1]].view(y.shape[0], y.shape[1])


def err_of(kind, y, truth) -> float:
    """Error of `kind`'s output y against the float64 truth of as many images (its sums against the truth's)."""
    if kind.split("_c")[0] in VARIANTS and is_sum(kind.split("_c")[0]):
        return err(sums_of(y)[:truth.shape[0]], truth.sum((2, 3)))
    return err(y[:truth.shape[0]], truth)


def err(got, truth) -> float:
    if got.isnan().any():
        return float("nan")
    return ((got.double() - truth).abs().max() / truth.pow(2).mean().sqrt()).item()


def odd_cases(ext, stream, record) -> bool:
    """Each odd case against float64, every variant and band size; False when one of ours is wrong."""
    import torch
    import torch.nn.functional as F

    good = True
    for name, xs, k, padding, dilation in ODD:
        kh, kw = int(name[-3]), int(name[-1])
        torch.manual_seed(len(record["odd"]))
        x, w, b = (torch.randn(xs, device="cuda"), torch.randn([k, xs[1], kh, kw], device="cuda"),
                   torch.randn(k, device="cuda"))
        truth = F.conv2d(x.double(), w.double(), b.double(), padding=padding, dilation=dilation)
        q, out = geometry(xs, k, (kh, kw), padding, dilation)
        row = {"instance": name, "x": xs, "k": k, "padding": padding, "dilation": dilation}
        ours = kinds_of(name)
        # the FFMA instance is built for unit dilation (its row-reuse path): compared only there
        kinds = ours + ([f"ffma_{name}"] if dilation == [1, 1] else [])
        for kind in kinds:
            try:
                y = ext.run(kind, x, w, b, q, out, stream)
                torch.cuda.synchronize()
                row[f"err_{kind}"] = err_of(kind, y, truth)
            except RuntimeError as exc:
                row[f"err_{kind}"], row[f"error_{kind}"] = float("nan"), str(exc).splitlines()[0][:200]
        ok = all(row[f"err_{v}"] < TOL for v in ours)
        good &= ok
        record["odd"].append(row)
        worst = max(ours, key=lambda v: row[f"err_{v}"] if row[f"err_{v}"] == row[f"err_{v}"] else float("inf"))
        ffma = f", ffma {row[f'err_ffma_{name}']:.1e}" if f"err_ffma_{name}" in row else ""
        print(f"odd {name} x{xs} k={k} p{padding} d{dilation}: worst of {len(ours)} {worst} {row[f'err_{worst}']:.1e}"
              f"{ffma} {'ok' if ok else 'WRONG'} {' '.join(row.get(f'error_{v}', '') for v in ours)}".rstrip(),
              flush=True)
    return good


def measure(ext, stream, timed, models, xs, k) -> tuple[dict, bool]:
    """One problem shape: each kernel's error vs float64 on the first two images and its median time; ours at each
    band size that fits shared memory."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    x = torch.randn(xs, device="cuda")
    w = torch.randn([k, xs[1], 3, 3], device="cuda") * (1.0 / (xs[1] * 9) ** 0.5)
    b = torch.randn(k, device="cuda")
    truth = F.conv2d(x[:2].double(), w.double(), b.double())
    row, good = {"models": models, "x": xs, "k": k, "ours": []}, True
    q, out = geometry(xs, k, (3, 3), [0, 0], [1, 1])
    flops = 2 * out[0] * k * out[2] * out[3] * xs[1] * 9
    for variant in VARIANTS:
        for chunks in bands_of("c8_3x3", variant):
            kind = f"{variant}_c8_3x3_b{chunks}"
            occ = ext.blocks_per_sm(kind, q)
            entry = {"variant": variant, "chunks": chunks, "blocks_per_sm": occ}
            row["ours"].append(entry)
            if occ <= 0:
                continue

            def fn(kind=kind):
                return ext.run(kind, x, w, b, q, out, stream)

            y = fn()
            torch.cuda.synchronize()
            entry["err"] = err_of(kind, y, truth)
            del y
            entry["ms"] = timed(fn)
            entry["tflops"] = flops / entry["ms"] / 1e9
            good &= entry["err"] < TOL
            print(f"  {models} {variant} band {chunks} x 128: {entry['ms']:.3f} ms ({entry['tflops']:.1f} TF/s, "
                  f"{entry['err']:.1e}), {occ} blocks an SM", flush=True)

    def cudnn(tf32):
        torch.backends.cudnn.allow_tf32 = tf32
        return F.conv2d(x, w, b)

    others = {"ffma": lambda: ext.run("ffma_c8_3x3", x, w, b, q, out, stream),
              "cudnn_fp32": lambda: cudnn(False), "cudnn_default": lambda: cudnn(True)}
    for kind, fn in others.items():
        y = fn()
        torch.cuda.synchronize()
        row[f"err_{kind}"] = err_of(kind, y, truth)
        del y
        row[f"ms_{kind}"] = timed(fn)
    torch.backends.cudnn.allow_tf32 = True
    row["tflops_ffma"] = flops / row["ms_ffma"] / 1e9
    return row, good


def main() -> int:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--out", default=None)
    ap.add_argument("--compile-only", default=None)
    ap.add_argument("--once", default=None, metavar="VARIANT:CHUNKS:SHAPE",
                    help="build, then call one variant once on one problem shape (index into SHAPES): for ncu")
    args = ap.parse_args()
    if args.compile_only:
        Path(args.compile_only, "conv_shift_lab.cu").write_text(source())
        return 0
    ext = build()
    stream = torch.cuda.current_stream().cuda_stream
    if args.once:
        variant, chunks, shape = args.once.split(":")
        xs, k = SHAPES[int(shape)][1:]
        x, w, b = (torch.randn(xs, device="cuda"), torch.randn([k, xs[1], 3, 3], device="cuda"),
                   torch.randn(k, device="cuda"))
        q, out = geometry(xs, k, (3, 3), [0, 0], [1, 1])
        ext.run(f"{variant}_c8_3x3_b{chunks}", x, w, b, q, out, stream)
        torch.cuda.synchronize()
        return 0
    record = {"environment": {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}, "odd": [],
              "shapes": []}
    good = odd_cases(ext, stream, record)
    flush = torch.empty(64 * 1024 * 1024 // 4, device="cuda")

    def timed(fn):
        return labtools.timed(fn, args.reps, flush)

    for models, xs, k in SHAPES:
        row, ok = measure(ext, stream, timed, models, xs, k)
        good &= ok
        record["shapes"].append(row)
        best = min((e for e in row["ours"] if "ms" in e and not is_sum(e["variant"])), key=lambda e: e["ms"],
                   default=None)
        ours = (f"{best['variant']} band {best['chunks']} {best['ms']:.3f} ({best['tflops']:.1f} TF/s)" if best
                else "none")
        print(f"{models} x{xs} -> {k}: best storing {ours}; ffma {row['ms_ffma']:.3f} ({row['tflops_ffma']:.1f} TF/s, "
              f"{row['err_ffma']:.1e}) cudnn fp32 {row['ms_cudnn_fp32']:.3f} ({row['err_cudnn_fp32']:.1e}) "
              f"default {row['ms_cudnn_default']:.3f} ({row['err_cudnn_default']:.1e})", flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(record, indent=1))
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
