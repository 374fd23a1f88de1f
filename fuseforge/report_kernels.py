"""The report's section "How the kernels are implemented and called": each kernel family's structure, precision
and layouts (what the fixed C++ in `codegen/*_runtime.py` and the lab files do), then the calls in
`ModelNew.forward`. Kept next to the code it describes: a change to a kernel family's runtime changes its
paragraph here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .codegen.gemm_runtime import GEMM_VARIANT, VARIANT_NAMES

if TYPE_CHECKING:
    from .pipeline import Run

RUN_ON_GPU = ("Run on an H100 in this pipeline: GPU tests on odd sizes against float64 and the problem models "
              "(`bench/NOTES.md`).")


def kernels_how(run: Run) -> list[str]:
    lines = ["## How the kernels are implemented and called", ""]
    if not run.plan.groups:
        return lines + ["No kernels were generated.", ""]
    lines += [
        "Every kernel has the same structure (see `30_kernels/kernels.cu`): an element function "
        "(`__host__ __device__`) computes the group's ops for one element in fp32 with one named local per "
        "graph value; the `__global__` kernel runs a grid-stride loop over the output, four elements per step "
        "with 16-byte `float4` loads and stores when the element count is a multiple of 4 and every dense "
        "operand is 16-byte aligned, else one element per step. Broadcast operands (bias vectors, "
        "per-channel scales, scalars) are read through their strides after the binding merges mergeable "
        "dimensions (one offset per four elements when the innermost dimension is a multiple of 4). An "
        "operand that is channels-last over an [N, C, S] output (a convolution that `layout.py` ran "
        "channels-last) switches the kernel to its tiled form: tiles of one sample, C rounded up to a power "
        "of two (at most 32) channels × 1024 / that positions, pass through shared memory, read along "
        "channels and written along positions, both coalesced and 16 bytes per access when C and the "
        "positions are multiples of 4; the output stays contiguous. 32-bit indexing is used below 2^31 elements. 256 threads per block, at most 8 blocks "
        "per multiprocessor. The binding (`30_kernels/binding.cpp`) checks dtypes and devices, allocates "
        "the outputs and launches on the caller's current CUDA stream; every launch is checked.",
        "",
    ]
    used = sorted({g.family for g in run.plan.groups if g.family is not None}, key=lambda f: f.order)
    lines += [line for f in used for line in f.how()]
    if any(g.gemm for g in run.plan.groups):
        lines += _gemm_how()
    lines += ["Calls in `ModelNew.forward` (`model_new.py`):", ""]
    for g in run.plan.groups:
        shape = g.family.call_shape(g) if g.family is not None and g.kind != "gemm" \
            else f"iteration shape {list(g.shape)}"
        if g.gemm:
            m = g.gemm.gemm
            shape = (f"{m.op} {m.layout} of {m.a} (A) and {m.b} (B) -> {list(g.shape)}"
                     + (f", epilogue reads {', '.join(f'{i} ({c})' for i, c in g.gemm.operands)}"
                        if g.gemm.operands else ""))
        lines.append(f"- `{', '.join(g.outputs)} = kernels.{g.name}({', '.join([*g.inputs, 'stream'])})` — {shape}")
    return lines + [""]


def _gemm_how() -> list[str]:
    return [
        "GEMM kernels (`--gemm-kernels`) are the lab's 3xTF32 GEMM (`dev/kernels/gemm_3xtf32.cu`, "
        "taken verbatim into `30_kernels/kernels.cu`) with a generated epilogue functor. Precision: each fp32 "
        "operand value x is split into two TF32 values, a big part (x rounded to TF32 for A; B's own value, which "
        "the tensor core truncates to TF32) and the small remainder, split so that the error of big + small "
        "is unbiased, and a_small·b_big + a_big·b_small + a_big·b_big is accumulated on the tensor cores in fp32 "
        "(the small·small term, below 2^-21 relative, is dropped). The tensor core's own accumulation rounds "
        "toward zero, so every 2 k-tiles of 32 start from a fresh accumulator, added to the running sum with an "
        "ordinary round-to-nearest fp32 add, and each such chain takes the small products first and the big ones "
        "last (fewer roundings of a large sum: a bias that a mean over rows, such as train-mode BatchNorm's, "
        "would keep). Measured on an H100 at 1024x8192x8192: relative error 2.9e-7 vs float64, against cuBLAS "
        "SGEMM's 1.6e-6 (fp32-class, DESIGN §3). Tiling: 128 × 128 output tiles, 32-wide k-tiles, one "
        "persistent block per multiprocessor looping over the tiles, with two warpgroups on the tensor cores, "
        "one thread issuing TMA loads of each k-tile (zero-filled past the edges, so any M, N, K works; 16-byte "
        "aligned rows, else bounds-checked cp.async copies) and six warps splitting B; stores are bounds-checked "
        "(8-byte when C's rows allow). The kernel reads B as [N, K] rows (`x @ W.T`, or a transposed operand, "
        "as it is); an NN product's B ([K, N] rows, chosen from the traced strides) is copied to [N, K] rows by "
        "the binding (its cost is in the time model that picks the kernel over cuBLAS), which also copies an "
        f"operand whose rows are not unit-stride. Kernel variant {GEMM_VARIANT} ({VARIANT_NAMES[GEMM_VARIANT]}; "
        "the constant `kFFGemmVariant` in the generated source: 0 mma.sync, 1 wgmma, 2 warp-specialised wgmma). "
        "Measured in the lab on an H100 at 1024x8192x8192: 57.3, 75.7 and 135.8 TFLOP/s for variants 0, 1 and 2 "
        "(cuBLAS SGEMM about 50); all three passed the lab's full sweep (ragged, NN, batched), and all three "
        "the GPU tests on odd shapes against float64. The epilogue runs per output element on the accumulator (bias, "
        "per-row and per-column vectors, scalars, full-shape inputs such as a residual are read through the "
        "read-only cache); extra outputs are written by the functor. Built for sm_90a (H100/H200) only. "
        + RUN_ON_GPU,
        "",
    ]
