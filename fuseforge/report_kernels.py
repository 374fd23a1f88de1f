"""The report's section "How the kernels are implemented and called": the pointwise kernels' structure, each
used kernel family's paragraph (`Family.how`, kept next to the family's code), then the calls in
`ModelNew.forward`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .run import Run

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
    lines += ["Calls in `ModelNew.forward` (`model_new.py`):", ""]
    for g in run.plan.groups:
        shape = g.family.call_shape(g) if g.family is not None else f"iteration shape {list(g.shape)}"
        lines.append(f"- `{', '.join(g.outputs)} = kernels.{g.name}({', '.join([*g.inputs, 'stream'])})` — {shape}")
    return lines + [""]
