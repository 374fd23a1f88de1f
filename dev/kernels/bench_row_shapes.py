"""How the generated row kernel's rate depends on the number of rows, at a fixed number of values (GPU).

    python3 dev/kernels/bench_row_shapes.py --out $OUT/row_shapes.json

A row kernel runs one row per block (per warp for short rows): with few long rows most SMs idle. This
times the kernel fuseforge generates for relu(x).mean(-1) (a prologue and a per-row value, the form of a
global average pool after an activation) against eager and torch.compile at rows x cols = 2^25 values for
rows from 8 to 32768, and checks each result against float64. Medians of --reps CUDA-event timings, L2
flushed before each; GB/s counts x read once.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench_reduce_weight import timed  # noqa: E402  (CUDA events after an L2 flush, median)

from fuseforge.capture import capture  # noqa: E402
from fuseforge.codegen import generate  # noqa: E402
from fuseforge.families import named  # noqa: E402
from fuseforge.load import LoadedModel  # noqa: E402
from fuseforge.partition import partition  # noqa: E402


class ReluMean(nn.Module):
    def forward(self, x):
        return torch.relu(x).mean(dim=-1)


def _kernel():
    from torch.utils.cpp_extension import load_inline

    loaded = LoadedModel(path=types.SimpleNamespace(name="row_shapes.py", stem="row_shapes"), source="",
                         module=None, model=ReluMean(), init_args=[], inputs=[torch.randn(4, 8)], outputs=[],
                         output_is_tuple=False)
    captured = capture(loaded)
    plan = partition(captured.graph, named("rows"))
    (group,) = plan.groups
    ext = generate(plan, captured.graph, "row_shapes.py")
    module = load_inline(name=ext.name, cpp_sources=[ext.binding], cuda_sources=[ext.cuda],
                         functions=list(ext.functions), extra_cflags=list(ext.cflags), extra_cuda_cflags=list(ext.nvcc_flags),
                         no_implicit_headers=True)
    return getattr(module, group.name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    kernel = _kernel()
    stream = torch.cuda.current_stream().cuda_stream
    compiled = torch.compile(ReluMean())
    flush = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    results = []
    for rows in (8, 32, 128, 512, 2048, 8192, 32768):
        cols = (1 << 25) // rows
        x = torch.randn(rows, cols, device="cuda")
        truth = torch.relu(x.double()).mean(-1)
        ours = kernel(x, stream)
        error = ((ours.double() - truth).norm() / truth.norm()).item()
        eager_error = ((ReluMean()(x).double() - truth).norm() / truth.norm()).item()
        ms = {"ours": timed(lambda x=x: kernel(x, stream), args.reps, flush),
              "eager": timed(lambda x=x: ReluMean()(x), args.reps, flush),
              "compile": timed(lambda x=x: compiled(x), args.reps, flush)}
        results.append({"rows": rows, "cols": cols, "ms": ms, "error": error, "eager_error": eager_error,
                        "gbs": {k: x.numel() * 4 / (v * 1e-3) / 1e9 for k, v in ms.items()}})
    print(f"{'rows':>6} {'cols':>8} {'ours ms':>8} {'eager':>8} {'compile':>8} {'ours GB/s':>9} {'error':>9} {'eager err':>9}")
    for r in results:
        m = r["ms"]
        print(f"{r['rows']:>6} {r['cols']:>8} {m['ours']:>8.3f} {m['eager']:>8.3f} {m['compile']:>8.3f} "
              f"{r['gbs']['ours']:>9.0f} {r['error']:>9.2e} {r['eager_error']:>9.2e}")
    if args.out:
        args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                        "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
