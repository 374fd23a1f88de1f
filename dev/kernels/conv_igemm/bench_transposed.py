"""Lab bench of the tensor-core kernel's transposed convolutions (igemm.cuh's `launch_transposed`: each output parity
class stored by its own blocks, a class writing every second output of a row at stride 2) against cuDNN's transposed
call (NCHW and channels-last, without the bias pass) -- on odd shapes against float64 first, then on the transposed
convolutions of the problem models with stride 2. (A paired store, two column classes of a box stored together by a
cluster of two blocks through distributed shared memory, was measured here on an H200 and removed: 1.7-3x slower than
each class's own store, bench/results/2026-11-28d_gpu/.)

    .venv/bin/python dev/kernels/conv_igemm/bench_transposed.py [--out transposed.json] [--trials 30]

Needs an sm_90a GPU. Prints one line per (shape, variant): error vs float64 of the TF32-rounded operands (the kernel's
own rounding, so what is left is its fp32 accumulation: at most 1e-4 of the output's RMS), median ms after an L2 flush
(`labtools.timed`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE.parent))
from bench_conv_igemm import KERNELBENCH, PACKAGE_CONV, round_up  # noqa: E402
from labtools import timed  # noqa: E402

from fuseforge.families.conv.tiling import NCHW_BOX_WIDTH, pixel_box  # noqa: E402

INSTANCES = ("cl_n128", "cl_n64")  # conv_igemm.cu's transposed
MODELS = ("16_ConvTranspose2d_Mish_Add_Hardtanh_Scaling", "20_ConvTranspose3d_Sum_ResidualAdd_Multiply_ResidualAdd",
          "93_ConvTranspose2d_Add_Min_GELU_Multiply", "100_ConvTranspose3d_Clamp_Min_Divide")
# (input shape, C -> K, window, stride, padding, output padding): odd sizes, every class non-empty
ODD = (((2, 40, 7, 9), 33, (4, 4), (2, 2), (0, 0), (0, 0)),
       ((2, 16, 6, 32), 70, (3, 3), (2, 2), (1, 1), (1, 1)),
       ((1, 32, 4, 6, 5), 20, (3, 3, 3), (2, 2, 2), (1, 1, 1), (0, 1, 0)))

BINDING = r"""
#include <torch/extension.h>
#include <string>
#define DECL(NAME) extern "C" int conv_igemm_transposed_##NAME(const float*, const float*, float*, const float*, \
                                                               float*, const int*, int, void*);
%(decls)s
extern "C" int conv_igemm_prepare_input(const float*, float*, int, int, int, long long, void*);
int64_t transposed_out(const std::string& name, torch::Tensor x, torch::Tensor w, torch::Tensor w_re, torch::Tensor y,
                       std::vector<int64_t> geometry, int64_t stream) {
    TORCH_CHECK(geometry.size() == 27, "27 geometry ints");
    int g[27];
    for (int i = 0; i < 27; ++i) g[i] = static_cast<int>(geometry[i]);
    void* s = reinterpret_cast<void*>(stream);
%(dispatch)s
    TORCH_CHECK(false, "no instantiation named ", name);
}
int64_t prepare_input(torch::Tensor x, torch::Tensor out, int64_t cp, int64_t stream) {
    const long long spatial = x[0][0].numel();
    return conv_igemm_prepare_input(x.data_ptr<float>(), out.data_ptr<float>(), (int)x.size(0), (int)x.size(1),
                                    (int)cp, spatial, reinterpret_cast<void*>(stream));
}
"""


def build():
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0a")
    from torch.utils.cpp_extension import load_inline

    binding = BINDING % {
        "decls": "\n".join(f"DECL({n})" for n in INSTANCES),
        "dispatch": "\n".join(f'    if (name == "{n}") return conv_igemm_transposed_{n}(x.data_ptr<float>(), '
                              "w.data_ptr<float>(), w_re.data_ptr<float>(), nullptr, y.data_ptr<float>(), g, 0, s);"
                              for n in INSTANCES)}
    return load_inline(name="conv_igemm_transposed_lab", cpp_sources=[binding],
                       cuda_sources=[(HERE / "conv_igemm.cu").read_text()],
                       functions=["transposed_out", "prepare_input"], extra_cflags=["-O3"],
                       extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a"],
                       extra_include_paths=[str(PACKAGE_CONV)], no_implicit_headers=True)


def geometry(x_shape, k, window, stride, padding, output_padding) -> tuple[list[int], list[int]]:
    """The 27 geometry ints (the whole output, then the strides) and the output's shape."""
    n, c, *sp = x_shape
    dims = len(window)
    pad = [1] * (3 - dims)
    d, h, w = ([1] * (3 - dims)) + sp
    win = pad + list(window)
    st = pad + list(stride)
    p = [0] * (3 - dims) + list(padding)
    op = [0] * (3 - dims) + list(output_padding)
    out = [(s - 1) * t - 2 * q + kk + o for s, t, q, kk, o in zip((d, h, w), st, p, win, op)]
    box = pixel_box(*[-(-o // t) for o, t in zip(out, st)])  # class 0's extents: the largest
    g = [n, c, round_up(c, 4), round_up(c, 32), d, h, w, k, *out, *win, *p, 1, 1, 1, *box, NCHW_BOX_WIDTH[box[2]], *st]
    return g, [n, k, *out[3 - dims:]]


def tf32(t):
    import torch

    return ((t.contiguous().view(torch.int32) + 0x1000) & -0x2000).view(torch.float32)


def run_case(lab, shape, k, window, stride, padding, output_padding, trials: int, time_it: bool) -> list[dict]:
    import torch
    import torch.nn.functional as F

    conv = F.conv_transpose2d if len(window) == 2 else F.conv_transpose3d
    torch.manual_seed(0)
    x = torch.randn(*shape, device="cuda")
    w = torch.randn(shape[1], k, *window, device="cuda") / (shape[1] * torch.tensor(window).prod().item()) ** 0.5
    g, out_shape = geometry(shape, k, window, stride, padding, output_padding)
    # the reference of the TF32-rounded operands: float64 on the odd shapes; exact fp32 (cuDNN's TF32 off) on the
    # problem models' sizes, where cuDNN's float64 transposed convolution would take minutes (its error, ~1e-6 of the
    # output's RMS, is far below the kernel's bound of 1e-4)
    precise = torch.float64 if not time_it else torch.float32
    tf32_allowed = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    truth = conv(tf32(x).to(precise), tf32(w).to(precise), stride=stride, padding=padding,
                 output_padding=output_padding)
    torch.backends.cudnn.allow_tf32 = tf32_allowed
    rms = truth.double().pow(2).mean().sqrt().item()
    stream = torch.cuda.current_stream().cuda_stream
    x_cl = torch.empty(shape[0] * g[2] * g[4] * g[5] * g[6], device="cuda")
    w_re = torch.empty(k * g[11] * g[12] * g[13] * g[3], device="cuda")
    rows = []
    flush = torch.empty(64 << 20, device="cuda")  # 256 MB, past L2: zeroed before each timed call

    def ours(name):
        y = torch.empty(out_shape, device="cuda")
        if name.startswith("cl_"):
            assert lab.prepare_input(x, x_cl, g[2], stream) == 0
            src = x_cl
        else:
            src = x
        code = lab.transposed_out(name, src, w, w_re, y, g, stream)
        return y, code

    variants = {name: (lambda name=name: ours(name)) for name in INSTANCES}
    variants["cudnn_nchw"] = lambda: (conv(x, w, stride=stride, padding=padding, output_padding=output_padding), 0)
    x_l = x.contiguous(memory_format=torch.channels_last if len(window) == 2 else torch.channels_last_3d)
    w_l = w.contiguous(memory_format=torch.channels_last if len(window) == 2 else torch.channels_last_3d)
    variants["cudnn_channels_last"] = lambda: (conv(x_l, w_l, stride=stride, padding=padding,
                                                    output_padding=output_padding), 0)
    for name, fn in variants.items():
        y, code = fn()
        torch.cuda.synchronize()
        if code != 0:
            rows.append({"variant": name, "code": code})
            continue
        error = ((y - truth).abs().max().item() / rms) if name not in ("cudnn_nchw", "cudnn_channels_last") else None
        row = {"variant": name, "error": error}
        if time_it:
            row["ms"] = timed(fn, trials, flush)
        rows.append(row)
    return rows


def _per_axis(value, fill, dims: int) -> tuple:
    return tuple(value) if isinstance(value, (list, tuple)) else (fill if value is None else value,) * dims


def problem_cases():
    from fuseforge.capture import capture
    from fuseforge.load import load_model_file

    for name in MODELS:
        loaded = load_model_file(KERNELBENCH / f"{name}.py")
        captured = capture(loaded)
        for node in captured.graph.nodes:
            if node.op == "call_function" and "conv_transpose" in str(node.target):
                x, w = node.args[0].meta["val"], node.args[1].meta["val"]
                args, dims = list(node.args) + [None] * 8, w.dim() - 2
                shape = (loaded.inputs[0].shape[0],) + tuple(int(s) for s in x.shape[1:])  # the file's batch
                yield name, (shape, w.shape[1], tuple(w.shape[2:]), _per_axis(args[3], 1, dims),
                             _per_axis(args[4], 0, dims), _per_axis(args[5], 0, dims))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--trials", type=int, default=30)
    args = parser.parse_args()
    import torch

    lab = build()
    results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "odd": [], "problems": []}
    for case in ODD:
        for row in run_case(lab, *case, trials=args.trials, time_it=False):
            results["odd"].append({"case": repr(case), **row})
            print(f"odd {case}: {row}", flush=True)
    for name, case in problem_cases():
        for row in run_case(lab, *case, trials=args.trials, time_it=True):
            results["problems"].append({"model": name, **row})
            print(f"{name}: {row}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
