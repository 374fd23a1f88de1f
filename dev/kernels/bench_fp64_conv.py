"""How long does the float64 truth of a convolution take on the GPU? cuDNN's float64 call against an im2col + DGEMM.

    .venv/bin/python dev/kernels/bench_fp64_conv.py ../shared/problems/*/*.py --out $OUT/fp64_conv.json [--samples 8]

The verifier and `fuseforge check` compute every case's truth in float64 (a float64 copy of the model), and a
check of a convolution model calls it about 24 times; on an H200 a check of 32 (64 -> 128 channels, 3x3, 256x256,
batch 64) spent about 4 s per call in the reference worker. For each distinct 2-D convolution (not transposed) of
the models (`conv_precision.model_convolutions`), on the first `--samples` samples of its batch:

    cudnn      F.conv2d in float64 (what the truth runs today)
    im2col     F.unfold in float64, then one DGEMM per sample group (cuBLAS's float64 tensor-core path)

the median time (`conv_precision._median_ms`: CUDA events, L2 flushed) scaled to the whole batch, and the largest difference between the two relative to
the output's RMS (both are float64: it should be ~1e-15). A lab: it says whether the truth's convolutions are worth
replacing; nothing in the product depends on it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from fuseforge.evaluate.conv_precision import _median_ms, model_convolutions


def im2col_conv2d(x: torch.Tensor, w: torch.Tensor, stride, padding, dilation, groups: int) -> torch.Tensor:
    """conv2d as unfold + matmul (float64 stays float64)."""
    n, c, h, wd = x.shape
    k, cg, kh, kw = w.shape
    cols = F.unfold(x, (kh, kw), dilation=dilation, padding=padding, stride=stride)  # [n, c*kh*kw, L]
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    cols = cols.view(n, groups, cg * kh * kw, oh * ow)
    wg = w.view(groups, k // groups, cg * kh * kw)
    out = torch.einsum("gkr,ngrl->ngkl", wg, cols)
    return out.reshape(n, k, oh, ow)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--samples", type=int, default=8)
    args = parser.parse_args(argv)
    results: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "convolutions": {}}
    seen = set()
    for path in args.models:
        try:
            calls = model_convolutions(path)
        except Exception as exc:
            print(f"{path.stem}: {exc}", file=sys.stderr)
            continue
        for i, call in enumerate(calls):
            if call in seen or call.transposed or call.dims != 2:
                continue
            seen.add(call)
            batch = call.input_shape[0]
            n = min(batch, args.samples)
            gen = torch.Generator().manual_seed(0)
            x = torch.rand((n, *call.input_shape[1:]), generator=gen, dtype=torch.float64).cuda()
            w = (torch.rand(call.weight_shape, generator=gen, dtype=torch.float64) - 0.5).cuda()
            geometry = (list(call.stride), list(call.padding), list(call.dilation), call.groups)
            start = time.perf_counter()
            ref = F.conv2d(x, w, None, *geometry)
            ours = im2col_conv2d(x, w, *geometry)
            rms = ref.square().mean().sqrt().item() or 1.0
            row = {"call": {k: getattr(call, k) for k in call.__dataclass_fields__}, "samples": n,
                   "max_diff_rel": (ours - ref).abs().max().item() / rms,
                   "ms_cudnn_batch": _median_ms(lambda x=x, w=w, g=geometry: F.conv2d(x, w, None, *g), x.device)
                   * batch / n,
                   "ms_im2col_batch": _median_ms(lambda x=x, w=w, g=geometry: im2col_conv2d(x, w, *g), x.device)
                   * batch / n}
            del ref, ours
            torch.cuda.empty_cache()
            results["convolutions"][f"{path.stem}/{i}"] = row
            print(f"{path.stem}/{i}: float64 cuDNN {row['ms_cudnn_batch']:.1f} ms, im2col {row['ms_im2col_batch']:.1f} "
                  f"ms (whole batch of {batch}), difference {row['max_diff_rel']:.1e} "
                  f"({time.perf_counter() - start:.1f} s)", flush=True)
            args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
