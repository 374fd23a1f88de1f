"""Stage `report`: `report.md`, answering the questions of an optimisation request for this model.

Sections: summary; operators replaced; fusions and their benefit; algorithmic changes; operators left
unchanged and why; how each kernel is implemented and called; expected speedup and memory saving (cost
model, with its reasoning); measured results next to the prediction; limits of this result.
"""

from __future__ import annotations

import operator
from pathlib import Path
from typing import TYPE_CHECKING

from torch import fx

from . import channel_reductions, channelwise, pooling, rowwise
from .codegen.gemm_runtime import GEMM_VARIANT, VARIANT_NAMES
from .cost import VIEW_OPS, nbytes
from .partition import KernelStep, fusible_reason
from .partition_channel_reductions import channel_reduction_reason, pool_reason
from .partition_channels import channel_op_reason
from .partition_gemm import gemm_op_reason, is_gemm_op
from .partition_rows import row_op_reason
from .pointwise import op_key
from .rates import BANDWIDTH, GEMM3X_FLOPS, GEMM3X_MARGIN, GEMM3X_TILE, LAUNCH_S, SGEMM_FLOPS, SMS
from .report_measured import measured_section, summary_rows

if TYPE_CHECKING:
    from .pipeline import Run


def _op(node: fx.Node) -> str:
    return op_key(node).removeprefix("aten.") if hasattr(node.target, "_schema") else node.target.__name__


def _mb(b: float) -> str:
    return f"{b / 2**20:.1f} MiB"


def _ops_of(run: Run, names) -> str:
    by_name = {n.name: n for n in run.captured.graph.nodes}
    return " → ".join(f"`{_op(by_name[n])}`" for n in names)


def _replaced(run: Run) -> list[str]:
    lines = ["## Operators replaced", ""]
    if not run.plan.groups:
        return lines + ["None: no op of this model is pointwise, so no generated kernel was needed "
                        "(every op stays the torch call that eager PyTorch makes; see below).", ""]
    for g in run.plan.groups:
        what = (f"{_a(g.row.reduction.op)} over the last axis with the pointwise ops around it is memory-bound, "
                "so the win is to read " if g.row else "pointwise ops are memory-bound, so the win is to read ")
        if g.channel:
            what = (f"{_a(g.channel.norm.describe)} with the pointwise ops around it is memory-bound; two kernels (statistics, "
                    "then finalise + running statistics + normalise + epilogue) read the full-shape inputs twice, "
                    "instead of eager's statistics, normalise and one pass per pointwise op; they read ")
        if g.gemm:
            what = (f"{_a(g.gemm.gemm.op)} runs on the tensor cores in 3xTF32 (fp32-class) and its {len(g.nodes) - 1} "
                    "pointwise ops run on the accumulator before the one store, so the product is never written "
                    "and read back; it reads ")
        if g.channel_reduce:
            what = (f"{_a(g.channel_reduce.describe)} with the pointwise ops around it is memory-bound; one kernel "
                    "computes each pooled value from its window and/or reduces each (sample, position) over its "
                    "channels in registers, then runs the epilogue, so it reads ")
        kind = "GEMM kernel" if g.gemm else "row kernel" if g.row else "channel kernels" if g.channel else \
            f"{g.kind} kernel" if g.channel_reduce else "kernel"
        lines.append(f"- {_ops_of(run, g.nodes)} (graph values {', '.join(g.nodes)}) → generated "
                     f"{kind} `{g.name}`: {what}"
                     f"{', '.join(g.inputs)} once and write {', '.join(g.outputs)} once instead of a round trip "
                     "through device memory and a launch per op.")
    return lines + [""]


def _fusions(run: Run) -> list[str]:
    by_name = {n.name: n for n in run.captured.graph.nodes}
    lines = ["## Fusions and their benefit", ""]
    fused = [g for g in run.plan.groups if len(g.nodes) > 1]
    if not fused:
        lines.append("No kernel holds more than one op: every pointwise op here sits alone between anchors "
                     "(GEMMs, convolutions, reductions and norms that are no row kernel), which stay torch calls.")
    for g in fused:
        saved = sum(nbytes(by_name[n]) for n in g.nodes if n not in g.outputs)
        if g.channel_reduce:
            ops = [n for n in g.nodes if by_name[n].target is not operator.getitem]
            lines.append(f"- `{g.name}` fuses {len(ops)} ops ({_ops_of(run, ops)}) into one launch instead of "
                         f"{len(ops)}: about {_mb(2 * saved)} less traffic per call (the prologue's values, the "
                         "reduced value and the epilogue's intermediates stay in registers).")
            continue
        if g.channel:
            ops = [n for n in g.nodes if by_name[n].target is not operator.getitem]
            lines.append(f"- `{g.name}` fuses {len(ops)} ops ({_ops_of(run, ops)}) into two launches (statistics, then "
                         f"normalise + epilogue) instead of eager's norm kernels and one launch per pointwise op: "
                         f"about {_mb(2 * saved)} less traffic per call (the normalised value and other "
                         "intermediates stay in registers); the full-shape inputs are read twice.")
            continue
        lines.append(f"- `{g.name}` fuses {len(g.nodes)} ops ({_ops_of(run, g.nodes)}): "
                     f"{len(g.nodes) - 1} fewer launches and about {_mb(2 * saved)} less traffic per call "
                     "(intermediates written and read back by eager stay in registers).")
    return lines + [""]


def _algorithmic(run: Run) -> list[str]:
    lines = ["## Algorithmic changes", ""]
    if not run.rewrites.fired:
        lines.append("None. The rewrite stage found no applicable identity for this model"
                     + (f" and removed {run.rewrites.dead_removed} dead ops." if run.rewrites.dead_removed else ".")
                     + " Every result is computed by the same formulas as the original, in fp32.")
    for f in run.rewrites.firings:
        removed = (f" Removes about {f.flops_removed / 1e9:.2f} GFLOP and {_mb(f.bytes_removed)} of memory "
                   "traffic per call at the traced sizes." if f.flops_removed or f.bytes_removed else "")
        lines.append(f"- **{f.rule}** at `{f.node}`: {f.identity.rstrip('.')}. Holds for {f.scope}.{removed}")
    if run.rewrites.firings:
        lines += ["", "Weights derived from parameters (a pre-summed or composed weight) are recomputed from the "
                  "live parameters in every forward, so training and `load_state_dict` keep working. The CPU-side "
                  "check compared the rewritten program with the original model in float64."]
    return lines + [""]


_FRIENDLY = {
    "aten._native_batch_norm_legit_functional.default":
        "batch_norm, train mode (cuDNN, as eager; running statistics updated in place)",
    "aten._native_batch_norm_legit_no_training.default": "batch_norm, eval mode",
}


RUN_ON_GPU = ("Run on an H100 in this pipeline: GPU tests on odd sizes against float64 and the problem models "
              "(`bench/NOTES.md`).")


def _unchanged(run: Run) -> list[str]:
    by_name = {n.name: n for n in run.captured.graph.nodes}
    lines = ["## Operators left unchanged, and why", ""]
    torch_steps = [by_name[s.node] for s in run.plan.steps if not isinstance(s, KernelStep)]
    working = [n for n in torch_steps if not _moves_no_data(n)]
    free = [n for n in torch_steps if _moves_no_data(n)]
    if not torch_steps:
        return lines + ["None: every op runs in a generated kernel.", ""]
    for node in working:
        name = _FRIENDLY.get(op_key(node), f"`{_op(node)}`")
        why = _why_torch(node, run.config.row_kernels, run.config.channel_kernels, run.config.gemm_kernels)
        updates = [fqn for fqn, src in run.captured.buffer_mutations.items() if src == node.name]
        if updates:
            why = (f"the new value of buffer `{updates[0]}`, as the original model computes it in this mode; "
                   "too small to be worth a kernel.")
        elif node.name in run.plan.channels_last:
            why = ("convolution kept as the cuDNN call, given its input and weight channels-last (the input "
                   "converted by the extension's `ff_channels_last` tile-transpose kernel): every reader of "
                   "its output is a kernel that reads NHWC, so cuDNN does not convert its output back to NCHW "
                   "(eager pays that pass; `layout.py`).")
        elif node.all_input_nodes and all(a.name in run.captured.state_names for a in node.all_input_nodes):
            why = ("derives a weight from the parameters for a rewrite above; recomputed in every forward, "
                   "so it follows training and load_state_dict.")
        lines.append(f"- {name} ({node.name}): {why}")
    if free:
        lines.append(f"- views, tuple accesses and size queries ({', '.join(n.name for n in free)}): "
                     "no data is moved.")
    if run.plan.not_fused:
        lines += ["", "Neighbours that were not fused:"]
        lines += [f"- {w.producer} → {w.consumer}: {w.reason}" for w in run.plan.not_fused]
    return lines + [""]


def _a(phrase: str) -> str:
    """PHRASE with its indefinite article: "a softmax", "an amax"."""
    return f"{'an' if phrase[:1].lower() in 'aeiou' else 'a'} {phrase}"


def _moves_no_data(node: fx.Node) -> bool:
    return node.target is operator.getitem or str(node.target) in VIEW_OPS


def _why_torch(node: fx.Node, row_kernels: bool, channel_kernels: bool = False, gemm_kernels: bool = False) -> str:
    key = op_key(node)
    if gemm_kernels and is_gemm_op(node):
        return ("GEMM kept as the cuBLAS call eager makes: it is no GEMM kernel"
                + (f" ({gemm_op_reason(node)})." if gemm_op_reason(node) else "."))
    if channel_kernels and channelwise.is_channel_op(node):
        return ("batch norm kept as PyTorch's kernel: it is no channel kernel"
                + (f" ({channel_op_reason(node)})." if channel_op_reason(node) else
                   " (its neighbours could not join it; see below)."))
    if channel_kernels and pooling.is_pool_op(node):
        return f"pool kept as PyTorch's kernel: it joins no channel kernel ({pool_reason(node)})."
    if channel_kernels and channel_reductions.is_channel_reduction_op(node) and channel_reduction_reason(node) \
            and "channel axis" not in channel_reduction_reason(node) and "row" not in channel_reduction_reason(node):
        return f"reduction over the channels kept as PyTorch's kernel: {channel_reduction_reason(node)}."
    if any(k in key for k in ("linear", "matmul", "mm", "conv")):
        return ("GEMM/convolution anchor: kept as the cuBLAS/cuDNN call eager makes"
                + (" (GEMM kernels turned off, `--no-gemm-kernels`)." if not gemm_kernels and is_gemm_op(node) else "."))
    if any(k in key for k in ("norm", "softmax", "logsumexp", "sum", "mean", "amax", "min", "max", "pool")):
        if not row_kernels:
            return ("reduction or normalisation anchor: kept as PyTorch's kernel (row kernels turned off, "
                    "`--no-row-kernels`).")
        return ("reduction or normalisation anchor: kept as PyTorch's kernel; row kernels cover softmax, "
                "log_softmax, logsumexp, layer_norm, mean, sum, amax and amin over the last axis only"
                + (f" ({row_op_reason(node)})." if rowwise.is_row_op(node) and row_op_reason(node) else "."))
    return (fusible_reason(node) or "kept as a torch call") + "."


def _kernels_how(run: Run) -> list[str]:
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
    if any(g.row for g in run.plan.groups):
        lines += [
            "Row kernels (reductions and normalisations over the last axis, with their prologue and "
            "epilogue; design and numerics from `dev/kernels/rowwise.cu`) have a different structure: a "
            "generated `Op` struct spells the prologue (the value reduced), the per-row values and the "
            "epilogue; fixed templates run one warp per row (rows up to 1024 values, 8 rows per 256-thread "
            "block), one 512-thread block per row (up to 16384), or two passes over longer rows, with each "
            "element's inputs cached in registers between the reduction and the epilogue, 16-byte loads and "
            "stores when the row length is a multiple of 4 and every full-shape pointer is aligned. "
            "Statistics: online max and sum of exponentials (softmax, log_softmax, logsumexp), Welford with "
            "Chan's merge (layer_norm), fp32 sums (sum, mean), merged by warp shuffles and shared memory; "
            "precise expf/logf/sqrtf. " + RUN_ON_GPU,
            "",
        ]
    if any(g.channel for g in run.plan.groups):
        lines += [
            "Channel kernels (train-mode batch norm, `--channel-kernels`, with its pointwise prologue "
            "and epilogue) are a pair of launches around a generated `Op` struct that spells the prologue (the "
            "value normalised), the per-channel results and the normalise + epilogue step "
            "(`codegen/channel_runtime.py`). Launch 1 splits each channel into parts (about 1024 blocks in all) "
            "and writes Welford statistics (count, mean, M2) per (channel, part) to a small workspace: per "
            "value, or per four values on the 16-byte path, merged across threads with Chan's formula by warp "
            "shuffles and shared memory; no atomics, so results are the same on every run. Launch 2 merges "
            "each channel's partials in a fixed order, takes mean and 1/sqrt(biased variance + eps), writes the "
            "new running mean and variance (momentum · batch value + (1 − momentum) · old, with the unbiased "
            "variance, as PyTorch) and any other per-channel result once per channel, and writes the outputs. "
            "Layout NCHW: channel c of element i is (i / HW) % C; planes of HW values use one 256-thread block "
            "per (channel, part) with float4 loads and stores when HW % 4 == 0 and every full-shape pointer is "
            "aligned, scalar otherwise; [N, C] inputs (BatchNorm1d) use 32 channels × 8 rows per block. The new "
            "running statistics are returned and copied into the buffers by `ModelNew.forward`; the "
            "num_batches_tracked increment stays a torch call. Group norm runs on the same kernels with one "
            "unit of statistics per (sample, group of C / G channels), contiguous in memory, and no running "
            "statistics. A channels-last input (the output of a convolution that `layout.py` ran channels-last, "
            "when it is the group's one full-shape input) takes three launches instead "
            "(`codegen/channel_nhwc_runtime.py`): statistics per (sample, part of the positions, channel) with "
            "each warp reading 32 consecutive channels of a position, one warp per unit merging them in a fixed "
            "order, and normalise + epilogue over tiles of 32 channels × 64 positions whose outputs pass through "
            "shared memory so they are written NCHW, coalesced. " + RUN_ON_GPU,
            "",
        ]
    if any(g.gemm for g in run.plan.groups):
        lines += _gemm_how()
    if any(g.channel_reduce for g in run.plan.groups):
        lines += [
            "Channel-reduction kernels (amin, amax, sum, mean over axis 1 of [N, C, *spatial], "
            "`--channel-kernels`, with their pointwise prologue and epilogue) are one launch around a generated "
            "`Op` struct that spells the prologue (the value reduced, per element), the reduction (start value "
            "and combine) and the epilogue (per output position) (`codegen/channel_reduce_runtime.py`). One "
            "thread per output position (n, s) walks the C channels, strided by the spatial size S, and "
            "combines them in registers in channel order (min/max propagate NaN like torch; sums in fp32): no "
            "atomics, the same result on every run. A 256-thread block covers consecutive "
            "positions of one sample, so each warp's loads are contiguous; four positions per thread with "
            "16-byte loads and stores when S % 4 == 0 and every pointer is aligned, one otherwise; each thread "
            "loads 4 channels before it combines them, to keep several loads in flight. The input is read once and only the "
            "reduced outputs are written. A max or average pool before the reduction (kernel, stride, padding, "
            "dilation, ceil_mode as captured; PyTorch's divisor rule) is computed per channel from its window "
            "in registers, so the pooled tensor is never written; a pool with only pointwise ops after it is a "
            "pool kernel, one thread per pooled element. A channels-last input (the output of a convolution "
            "that `layout.py` ran channels-last) is read as it is: where it is the one full input, each warp "
            "reads 32 channels of a position at a time (128 contiguous bytes) into shared memory and each thread "
            "then combines its position's channels in the same order; a pool reads a channels-last input with "
            "its values C apart. " + RUN_ON_GPU,
            "",
        ]
    lines += ["Calls in `ModelNew.forward` (`model_new.py`):", ""]
    for g in run.plan.groups:
        shape = (f"rows of {list(g.shape)}, {g.row.reduction.op} of {g.row.reduction.data}; reads "
                 + ", ".join(f"{i} ({c})" for i, c in g.row.operands)) if g.row else f"iteration shape {list(g.shape)}"
        if g.gemm:
            m = g.gemm.gemm
            shape = (f"{m.op} {m.layout} of {m.a} (A) and {m.b} (B) -> {list(g.shape)}"
                     + (f", epilogue reads {', '.join(f'{i} ({c})' for i, c in g.gemm.operands)}"
                        if g.gemm.operands else ""))
        if g.channel:
            shape = (f"{g.channel.norm.describe} of {g.channel.norm.data} over {list(g.shape)}; reads "
                     + ", ".join(f"{i} ({c})" for i, c in g.channel.operands))
        if g.channel_reduce:
            spec = g.channel_reduce
            shape = (f"{spec.describe}: {list(g.shape)} -> {list(spec.out_shape)}; reads "
                     + ", ".join(f"{i} ({c})" for i, c in spec.operands))
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
        "persistent block per multiprocessor looping over the tiles; loads are bounds-checked and "
        "zero-filled (16-byte cp.async copies when A, B and their leading dimensions are 16-byte aligned, "
        "4-byte copies otherwise), so any M, N, K works; stores are bounds-checked (8-byte when C's rows "
        "allow). TN (B read as [N, K] rows: "
        "`x @ W.T`, or a transposed operand) or NN ([K, N] rows), chosen from the traced strides of B; the "
        "binding passes A and B with their leading dimensions and copies an operand only when its rows are not "
        f"unit-stride. Kernel variant {GEMM_VARIANT} ({VARIANT_NAMES[GEMM_VARIANT]}; the constant "
        "`kFFGemmVariant` in the generated source: 0 mma.sync, 1 wgmma, 2 warp-specialised wgmma). Measured "
        "in the lab on an H100 at 1024x8192x8192: 57.3, 75.7 and 103.9 TFLOP/s for variants 0, 1 and 2 (cuBLAS "
        "SGEMM about 50); all three passed the lab's full sweep (ragged, NN, batched), and all three "
        "the GPU tests on odd shapes against float64. The epilogue runs per output element on the accumulator (bias, "
        "per-row and per-column vectors, scalars, full-shape inputs such as a residual are read through the "
        "read-only cache); extra outputs are written by the functor. Built for sm_90a (H100/H200) only. "
        + RUN_ON_GPU,
        "",
    ]


def _expected(run: Run) -> list[str]:
    c = run.cost
    return ["## Expected speedup and memory saving (cost model)", "",
            f"Roofline per op: max(FLOPs / {SGEMM_FLOPS / 1e12:.0f} TFLOP/s, bytes / {BANDWIDTH / 1e12:.2f} TB/s) "
            f"+ {LAUNCH_S * 1e6:.0f} µs per launch, for eager's op sequence and for the plan.",
            "",
            f"- eager: {c.eager_launches} launches, {_mb(c.eager_bytes_moved)} moved, about {c.eager_s * 1e3:.3f} ms",
            f"- fuseforge: {c.plan_launches} launches, {_mb(c.plan_bytes_moved)} moved, about {c.plan_s * 1e3:.3f} ms",
            f"- expected speedup: **{c.speedup:.2f}x**, from the work removed by the algebraic rewrites (above) "
            "and the traffic and launches removed by fusion; anchors that are left (GEMMs, convolutions, norms) "
            "cost the same on both sides, so where they dominate the speedup is close to 1.",
            f"- expected memory saving: peak activation memory {_mb(c.eager_peak_activation_bytes)} → "
            f"{_mb(c.plan_peak_activation_bytes)} (**{c.memory_saving:.0%}**), because fused intermediates are "
            "never allocated; parameters and inputs are unchanged.",
            *([f"- GEMM kernels are costed in whole waves of {GEMM3X_TILE} x {GEMM3X_TILE} tiles over {SMS} SMs, "
               f"at {GEMM3X_FLOPS / 1e12:.1f} TFLOP/s per full wave (the lab's variant-2 measurement at "
               "1024x8192x8192 on an H100; variants 0 and 1 run slower), eager's GEMMs at cuBLAS SGEMM's "
               f"{SGEMM_FLOPS / 1e12:.0f}; a product that our kernel is not expected to run {GEMM3X_MARGIN}x faster "
               "than cuBLAS (few tiles over a long K, which cuBLAS splits) stays a cuBLAS call."] if any(g.gemm for g in run.plan.groups) else []), ""]


def _limits(run: Run) -> list[str]:
    lines = ["## Limits of this result", "",
             "- Forward only: the generated kernels have no backward, so train with the original `Model` "
             "(the state_dict is interchangeable).",
             "- Constants of the model (scalars such as scaling factors) are built into the kernels; "
             "`ModelNew` refuses other init args than those it was compiled for."]
    if run.captured.mode_dependent:
        mode = "train" if run.captured.training else "eval"
        lines.append(f"- The graph depends on train/eval mode; only {mode} mode was compiled, the other mode "
                     "runs the original forward.")
    if not run.captured.dynamic_batch:
        lines.append("- The batch size was kept static during capture: other batch sizes may not work.")
    lines += [f"- {n}" for n in run.notes]
    return lines + [""]


_FUSED_KINDS = {  # kernel kind -> what such kernels hold, in the order the sentence names them
    "gemm": "GEMMs with the pointwise ops after them",
    "pointwise": "pointwise ops",
    "row": "reductions and normalisations over the last axis with their pointwise neighbours",
    "channel": "batch and group norms with their pointwise neighbours",
    "channel-reduction": "reductions over the channel axis with their pointwise neighbours",
    "pool": "pools with the pointwise ops after them",
}


def _what_was_fused(run: Run) -> str:
    kinds = {g.kind for g in run.plan.groups}
    held = [what for kind, what in _FUSED_KINDS.items() if kind in kinds]
    if not held:
        return "found nothing to put into a generated kernel"
    listed = held[0] if len(held) == 1 else ", ".join(held[:-1]) + " and " + held[-1]
    return f"put its {listed} into generated CUDA kernels"


def render(run: Run) -> str:
    name = run.loaded.path.name
    parts = [f"# fuseforge report: {name}", "", *summary_rows(run), "",
             f"fuseforge captured the model as an ATen graph, {_what_was_fused(run)}, "
             "kept everything else as the torch calls eager PyTorch makes, and checked the result against a "
             "float64 run of the original model. Artefacts of each stage are next to this file "
             "(`00_captured.txt` … `60_bench.json`).", ""]
    for section in (_replaced, _fusions, _algorithmic, _unchanged, _kernels_how, _expected):
        parts += section(run)
    parts += measured_section(run)
    parts += _limits(run)
    return "\n".join(parts)


def write_report(run: Run, path: Path) -> None:
    path.write_text(render(run))
