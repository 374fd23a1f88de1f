"""The transposing kernels (fuseforge/cuda/tiles.cuh's FFTiles) against PyTorch and torch.compile, at the conv models' sizes.

    .venv/bin/python dev/kernels/bench_tiles.py --out $OUT/tiles.json

Two rows per shape [N, C, H, W] (or 5-D):
  to_cl     a contiguous tensor to channels-last: our ff_channels_last, PyTorch's
            x.contiguous(memory_format=...), torch.compile of that line
  epilogue  a channels-last tensor through an epilogue to a contiguous output: our generated pointwise kernel (its
            tiled path), torch.compile of the same function (its output layout is its own choice), and our kernel
            on a contiguous input (the flat path: the same bytes, no transpose) as the floor. The epilogue is
            tanh(x + bias) * 0.5, or with --epilogue gelu min(x + bias + 0.5, 0) -> exact GELU -> * 2 (erff, as
            in the conv-transpose + GELU models)
Medians of --reps CUDA-event timings, L2 flushed before each; the rate counts one read and one write.
Every result is compared with PyTorch's values before it is timed. Prints a table last.

    --variants log11,minblocks12,previous   our kernels also built with the lab's text changes (tiles.cuh and the
                        generated kernel are unchanged), times in "<key>_<variant>" columns:
                          log<L>        tiles of 2^L elements (FF_TILE_LOG_ELEMENTS)
                          minblocks<B>  the pointwise tiled kernel's quads path compiled for B blocks a multiprocessor
                          previous      the tiles before 2026-11-28: 256 threads on tiles of 2048, no minimum blocks
                          swizzle       a tile's quads of positions XOR-permuted by channel group within each row
                                        (FFTiles::slot): the channels-last phases' scalar shared-memory accesses
                                        (four rows per quad) 4-way bank-conflicted at 32 channels, 2-way at 16, now
                                        none; the 16-byte accesses along positions stay conflict-free. Measured on an
                                        H200 (2026-11-28, bench/results/2026-11-28f_gpu): no faster (GELU epilogue
                                        over [128, 128, 130, 130] 0.682 -> 0.734 ms, tanh 0.620 -> 0.620): not adopted
                          nochannelquads the tiles before 2026-11-29: single elements on both sides wherever S or C is no
                                        multiple of 4 (FFTiles::channel_quads off)
                        joined with "+" to combine: previous+log12
The flat path's magic divisors (cuda/types.cuh's ff_div32), a lab variant here first, are the product's since
2026-11-28: flat GELU epilogue 0.735 -> 0.678 ms over [128, 128, 130, 130], 1.426 -> 1.239 over [128, 64, 256, 256]
(H200, bench/results/2026-11-28f_gpu).
                        joined with "+" to combine: previous+log12
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

PRODUCT_TILE = "FF_TILE_ELEMENTS = 1024, FF_TILE_LOG_ELEMENTS = 10"  # fuseforge/cuda/tiles.cuh's tile size
PRODUCT_THREADS = "FF_TILE_THREADS = 128"
PRODUCT_BOUNDS = "kQuads && sizeof(index_t) == 4 ? FF_TILE_MIN_BLOCKS : 8"  # the tiled pointwise kernel's minimum blocks
CHANNEL_QUADS = "channel_quads = aligned && C % 4 == 0;"  # FFTiles' channels-last side quads (cuda/tiles.cuh)
# swizzle: FFTiles::slot (cuda/tiles.cuh)
SLOT = "    __device__ __forceinline__ int slot(int p, int c) const { return c * pitch() + p; }\n"
SWIZZLED_SLOT = """    // (lab) quads of positions XOR-permuted by channel group within a row: the channels-last phases' four rows of one
    // quad land on distinct banks; channels c .. c + 3 of a quad share the permutation, positions stay 16-byte quads
    __device__ __forceinline__ int slot(int p, int c) const {
        const int mask = ((1 << log_span) >> 2) < 8 ? ((1 << log_span) >> 2) - 1 : 7;
        return c * pitch() + ((((p >> 2) ^ ((c >> 2) & mask))) << 2) + (p & 3);
    }
"""
SHAPES = [(64, 16, 128, 128), (32, 16, 256, 256), (64, 16, 256, 256), (32, 4, 18, 66, 66), (64, 32, 64, 64), (64, 32, 128, 128),
          (64, 64, 128, 128), (8, 5, 100, 100)]


class BiasTanhScale(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(c))

    def forward(self, x):
        return torch.tanh(x + self.bias.view(-1, *[1] * (x.dim() - 2))) * 0.5


class BiasMinGelu(BiasTanhScale):
    def forward(self, x):
        x = x + self.bias.view(-1, *[1] * (x.dim() - 2)) + 0.5
        return nn.functional.gelu(torch.clamp_max(x, 0.0)) * 2.0


EPILOGUES = {"tanh": BiasTanhScale, "gelu": BiasMinGelu}


def variant_text(cuda: str, variant: str) -> str:
    """The generated kernels' text with a lab variant's changes (module docstring)."""
    for part in variant.split("+"):
        if part.startswith("log"):
            log = int(part[3:])
            assert PRODUCT_TILE in cuda
            cuda = cuda.replace(PRODUCT_TILE, f"FF_TILE_ELEMENTS = {1 << log}, FF_TILE_LOG_ELEMENTS = {log}")
        elif part.startswith("minblocks"):
            assert PRODUCT_BOUNDS in cuda
            cuda = cuda.replace(PRODUCT_BOUNDS, part[9:])
        elif part == "swizzle":
            assert SLOT in cuda, "the product's text changed"
            cuda = cuda.replace(SLOT, SWIZZLED_SLOT)
        elif part == "nochannelquads":
            assert CHANNEL_QUADS in cuda, "the product's text changed"
            cuda = cuda.replace(CHANNEL_QUADS, "channel_quads = aligned && C % 4 == 0 && S % 4 == 0;")  # == quads
        elif part == "previous":
            assert PRODUCT_THREADS in cuda and PRODUCT_BOUNDS in cuda and PRODUCT_TILE in cuda
            cuda = cuda.replace(PRODUCT_THREADS, "FF_TILE_THREADS = 256").replace(f", {PRODUCT_BOUNDS})", ")")
            cuda = cuda.replace(PRODUCT_TILE, "FF_TILE_ELEMENTS = 2048, FF_TILE_LOG_ELEMENTS = 11")
        else:
            raise SystemExit(f"unknown variant {part!r}")
    return cuda


def _fmt(dim):
    return torch.channels_last if dim == 4 else torch.channels_last_3d


def _build(model, example, variant: str | None = None):
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
    binding = ext.binding + LAYOUT_BINDING_RUNTIME
    if variant is not None:  # replaced in this lab build's text only
        cuda = variant_text(cuda, variant)
    lib = load_inline(name=ext.name + "_cl" + ("_" + variant.replace("+", "_") if variant else ""),
                      cpp_sources=[binding], cuda_sources=[cuda],
                      functions=[*ext.functions, "ff_channels_last"], extra_cflags=["-O3"], extra_cuda_cflags=["-O3"],
                      no_implicit_headers=True)
    return group, lib


class Case:
    """One shape's tensors: x contiguous and channels-last, the bias model; our kernels checked against PyTorch."""

    def __init__(self, shape, epilogue=BiasTanhScale):
        dim = len(shape)
        self.fmt = _fmt(dim)
        self.stream = torch.cuda.current_stream().cuda_stream
        self.model = epilogue(shape[1]).cuda()
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
            torch.testing.assert_close(kernel(x, bias_view, stream), self.model(x), rtol=1e-6, atol=1e-6)  # flat
            return {f"to_cl_ours_ms{suffix}": timed(lambda: lib.ff_channels_last(x, stream), reps, flush),
                    f"epilogue_ours_ms{suffix}": timed(lambda: kernel(x_cl, bias_view, stream), reps, flush),
                    f"epilogue_flat_ms{suffix}": timed(lambda: kernel(x, bias_view, stream), reps, flush)}


def bench_shape(case: Case, group, lib, reps: int, flush: torch.Tensor) -> dict:
    """Ours (the product's tile size), PyTorch's and compile's, and the flat path's floor."""
    x, fmt = case.x, case.fmt
    to_cl = torch.compile(lambda t: t.contiguous(memory_format=fmt))
    row = {"shape": list(x.shape), **case.ours(group, lib, reps, flush),
           "to_cl_torch_ms": timed(lambda: x.contiguous(memory_format=fmt), reps, flush),
           "to_cl_compile_ms": timed(lambda: to_cl(x), reps, flush)}
    with torch.no_grad():
        compiled = torch.compile(case.model)
        row["epilogue_compile_ms"] = timed(lambda: compiled(case.x_cl), reps, flush)
    return row


def _rates(row: dict) -> dict:
    gbytes = 2 * math.prod(row["shape"]) * 4 / 1e9  # one read and one write
    return row | {"gbytes": gbytes} | {k.replace("_ms", "_gbps"): gbytes / (v / 1e3) for k, v in row.items()
                                       if k.endswith("_ms") or "_ms_" in k}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--variants", default="")
    parser.add_argument("--epilogue", choices=sorted(EPILOGUES), default="tanh")
    parser.add_argument("--shapes", default="")
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes.split(";")] if args.shapes else SHAPES
    variants = [v for v in args.variants.split(",") if v]
    epilogue = EPILOGUES[args.epilogue]
    flush = torch.empty(64 * 2**20, device="cuda")
    built = {}
    rows = []
    for shape in shapes:
        dim = len(shape)
        for variant in [None, *variants]:
            if (dim, variant) not in built:
                built[dim, variant] = _build(epilogue(3), torch.randn(2, 3, *[5] * (dim - 2)), variant)
        case = Case(shape, epilogue)
        row = {"epilogue": args.epilogue} | bench_shape(case, *built[dim, None], args.reps, flush)
        for variant in variants:
            row |= case.ours(*built[dim, variant], args.reps, flush, "_" + variant)
        rows.append(_rates(row))
        del case
        print(json.dumps(rows[-1]), flush=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(meta, indent=1))
    print(f"\n{'shape':<22}{'to_cl ours/torch/compile ms':>32}{'epilogue ours/compile/flat ms':>34}"
          + "".join(f"{v:>20}" for v in variants))
    for r in rows:
        print(f"{str(r['shape']):<22}{r['to_cl_ours_ms']:>12.3f}{r['to_cl_torch_ms']:>10.3f}{r['to_cl_compile_ms']:>10.3f}"
              f"{r['epilogue_ours_ms']:>14.3f}{r['epilogue_compile_ms']:>10.3f}{r['epilogue_flat_ms']:>10.3f}"
              + "".join(f"{r['epilogue_ours_ms_' + v]:>20.3f}" for v in variants))


if __name__ == "__main__":
    main()
