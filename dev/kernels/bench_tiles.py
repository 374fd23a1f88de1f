"""The transposing kernels (fuseforge/cuda/tiles.cuh's FFTiles) against PyTorch and torch.compile, at the conv models' sizes.

    .venv/bin/python dev/kernels/bench_tiles.py --out $OUT/tiles.json

Two rows per shape [N, C, H, W] (or 5-D):
  to_cl     a contiguous tensor to channels-last: our ff_channels_last, PyTorch's
            x.contiguous(memory_format=...), torch.compile of that line
  epilogue  a channels-last tensor through tanh(x + bias) * 0.5 to a contiguous output: our generated
            pointwise kernel (its tiled path), torch.compile of the same function (its output layout is
            its own choice), and our kernel on a contiguous input (the flat path: the same bytes, no
            transpose) as the floor
Medians of --reps CUDA-event timings, L2 flushed before each; the rate counts one read and one write.
Every result is compared with PyTorch's values before it is timed. Prints a table last.

    --tile-logs 11,12   our kernels built once per tile size (log2 of a tile's elements, replaced in the text of
                        tiles.cuh for the lab build): the first's times are the main columns, the others' go in
                        "<key>_log<L>" columns
    --shapes "128,128,130,130;64,64,128,128"   other shapes than SHAPES
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch
from bench_reduce_weight import timed  # this folder's CUDA-event timer
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

PRODUCT_TILE = "FF_TILE_ELEMENTS = 2048, FF_TILE_LOG_ELEMENTS = 11"  # fuseforge/cuda/tiles.cuh's tile size
SHAPES = [(64, 16, 128, 128), (32, 16, 256, 256), (64, 16, 256, 256), (32, 4, 18, 66, 66), (64, 32, 64, 64), (64, 32, 128, 128),
          (64, 64, 128, 128), (8, 5, 100, 100)]


class BiasTanhScale(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(c))

    def forward(self, x):
        return torch.tanh(x + self.bias.view(-1, *[1] * (x.dim() - 2))) * 0.5


def _fmt(dim):
    return torch.channels_last if dim == 4 else torch.channels_last_3d


def _build(model, example, tile_log: int | None = None):
    from test_partition import _captured
    from torch.utils.cpp_extension import load_inline

    from fuseforge.codegen import generate
    from fuseforge.codegen.layout_kernel import LAYOUT_BINDING_RUNTIME, LAYOUT_KERNEL_RUNTIME
    from fuseforge.partition import partition

    captured = _captured(model, example)
    plan = partition(captured.graph)
    (group,) = plan.groups
    ext = generate(plan, captured.graph, f"bench_tiles_{example.dim()}d.py")
    # the pointwise kernel plus ff_channels_last (which a plan adds only for a channels-last convolution)
    cuda = ext.cuda + LAYOUT_KERNEL_RUNTIME
    if tile_log is not None:  # tiles.cuh's tile size, replaced in this lab build's text only
        assert PRODUCT_TILE in cuda
        cuda = cuda.replace(PRODUCT_TILE, f"FF_TILE_ELEMENTS = {1 << tile_log}, FF_TILE_LOG_ELEMENTS = {tile_log}")
    lib = load_inline(name=ext.name + "_cl" + (f"_log{tile_log}" if tile_log else ""),
                      cpp_sources=[ext.binding + LAYOUT_BINDING_RUNTIME], cuda_sources=[cuda],
                      functions=[*ext.functions, "ff_channels_last"], extra_cflags=["-O3"], extra_cuda_cflags=["-O3"],
                      no_implicit_headers=True)
    return group, lib


class Case:
    """One shape's tensors: x contiguous and channels-last, the bias model; our kernels checked against PyTorch."""

    def __init__(self, shape):
        dim = len(shape)
        self.fmt = _fmt(dim)
        self.stream = torch.cuda.current_stream().cuda_stream
        self.model = BiasTanhScale(shape[1]).cuda()
        self.bias_view = self.model.bias.detach().view(-1, *[1] * (dim - 2))
        self.x = torch.randn(shape, device="cuda")
        self.x_cl = self.x.contiguous(memory_format=self.fmt)

    def ours(self, group, lib, reps: int, flush: torch.Tensor, suffix: str = "") -> dict:
        """ff_channels_last and the tiled epilogue (times under `suffix`), each checked against PyTorch first."""
        x, x_cl, bias_view, stream = self.x, self.x_cl, self.bias_view, self.stream
        ours_cl = lib.ff_channels_last(x, stream)
        assert ours_cl.is_contiguous(memory_format=self.fmt) and torch.equal(ours_cl, x), x.shape
        kernel = getattr(lib, group.name)
        with torch.no_grad():
            got = kernel(x_cl, bias_view, stream)
            assert got.is_contiguous(), x.shape
            torch.testing.assert_close(got, self.model(x), rtol=1e-6, atol=1e-6)
            return {f"to_cl_ours_ms{suffix}": timed(lambda: lib.ff_channels_last(x, stream), reps, flush),
                    f"epilogue_ours_ms{suffix}": timed(lambda: kernel(x_cl, bias_view, stream), reps, flush)}


def bench_shape(case: Case, group, lib, reps: int, flush: torch.Tensor) -> dict:
    """Ours (the product's tile size), PyTorch's and compile's, and the flat path's floor."""
    x, fmt = case.x, case.fmt
    to_cl = torch.compile(lambda t: t.contiguous(memory_format=fmt))
    row = {"shape": list(x.shape), **case.ours(group, lib, reps, flush),
           "to_cl_torch_ms": timed(lambda: x.contiguous(memory_format=fmt), reps, flush),
           "to_cl_compile_ms": timed(lambda: to_cl(x), reps, flush)}
    kernel = getattr(lib, group.name)
    with torch.no_grad():
        compiled = torch.compile(case.model)
        row["epilogue_compile_ms"] = timed(lambda: compiled(case.x_cl), reps, flush)
        row["epilogue_flat_ms"] = timed(lambda: kernel(x, case.bias_view, case.stream), reps, flush)
    return row


def _rates(row: dict) -> dict:
    gbytes = 2 * math.prod(row["shape"]) * 4 / 1e9  # one read and one write
    return row | {"gbytes": gbytes} | {k.replace("_ms", "_gbps"): gbytes / (v / 1e3) for k, v in row.items()
                                       if k.endswith("_ms") or "_ms_" in k}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--tile-logs", default="")
    parser.add_argument("--shapes", default="")
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes.split(";")] if args.shapes else SHAPES
    logs = [int(v) for v in args.tile_logs.split(",")] if args.tile_logs else [None]
    flush = torch.empty(64 * 2**20, device="cuda")
    built = {}
    rows = []
    for shape in shapes:
        dim = len(shape)
        for log in logs:
            if (dim, log) not in built:
                built[dim, log] = _build(BiasTanhScale(3), torch.randn(2, 3, *[5] * (dim - 2)), log)
        case = Case(shape)
        row = bench_shape(case, *built[dim, logs[0]], args.reps, flush)
        for log in logs[1:]:
            row |= case.ours(*built[dim, log], args.reps, flush, f"_log{log}")
        rows.append(_rates(row))
        del case
        print(json.dumps(rows[-1]), flush=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(meta, indent=1))
    print(f"\n{'shape':<22}{'to_cl ours/torch/compile ms':>32}{'epilogue ours/compile/flat ms':>34}")
    for r in rows:
        print(f"{str(r['shape']):<22}{r['to_cl_ours_ms']:>12.3f}{r['to_cl_torch_ms']:>10.3f}{r['to_cl_compile_ms']:>10.3f}"
              f"{r['epilogue_ours_ms']:>14.3f}{r['epilogue_compile_ms']:>10.3f}{r['epilogue_flat_ms']:>10.3f}")


if __name__ == "__main__":
    main()
