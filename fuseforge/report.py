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

from .cost import VIEW_OPS, nbytes
from .families import FAMILIES
from .fusible import fusible_reason
from .ladder import describe
from .plan import KernelStep
from .pointwise import op_key
from .rates import BANDWIDTH, LAUNCH_S, SGEMM_FLOPS
from .report_kernels import kernels_how
from .report_measured import measured_section, summary_rows

if TYPE_CHECKING:
    from .config import OptimizeConfig
    from .run import Run


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
        kind, what = "kernel", "pointwise ops are memory-bound, so the win is to read "
        if g.family is not None:
            kind, what = g.family.replaced(g)
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
        if g.family is not None:
            ops = [n for n in g.nodes if by_name[n].target is not operator.getitem]
            line = g.family.fusion(g, _ops_of(run, ops), len(ops), _mb(2 * saved))
            if line:
                lines.append(line)
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
        why = _why_torch(node, run.config)
        updates = [fqn for fqn, src in run.captured.buffer_mutations.items() if src == node.name]
        if updates:
            why = (f"the new value of buffer `{updates[0]}`, as the original model computes it in this mode; "
                   "too small to be worth a kernel.")
        elif node.name in run.plan.channels_last:
            why = ("convolution kept as the cuDNN call, given its input and weight channels-last (the input "
                   "converted by the extension's `ff_channels_last` tile-transpose kernel): every reader of "
                   "its output is a kernel that reads NHWC, so cuDNN does not convert its output back to NCHW "
                   "(eager pays that pass; `layout.py`). Precision: cuDNN picks its algorithm for this layout "
                   "(TF32 tensor cores where torch allows it, as eager for most shapes); the GPU verification "
                   "holds it to eager's own error for this shape, and a plan whose channels-last convolution "
                   "is less precise than eager's is left for the plan without layout changes."
                   + _measured_precision(run, node.name))
        elif str(node.target) in _CONVS:
            why = _why_torch(node, run.config) + (
                " Precision: eager's own call in eager's layout, so the same cuDNN algorithm and precision "
                "class as eager." + _measured_precision(run, node.name))
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


_CONVS = ("aten.conv1d.default", "aten.conv2d.default", "aten.conv3d.default", "aten.conv_transpose1d.default",
          "aten.conv_transpose2d.input", "aten.conv_transpose3d.input", "aten.convolution.default")


def _moves_no_data(node: fx.Node) -> bool:
    return node.target is operator.getitem or str(node.target) in VIEW_OPS


def _why_torch(node: fx.Node, config: OptimizeConfig) -> str:
    """Why NODE stays a torch call: what a kernel family says of it (asked from the last family to claim back
    to the first: a node in two tables, such as an amin over the channel axis, is explained by the family
    that tried it last), else as an anchor or an op no kernel computes."""
    for family in reversed(FAMILIES):
        why = family.why_torch(node, family.name in config.families)
        if why:
            return why
    if any(k in op_key(node) for k in ("linear", "matmul", "mm", "conv")):
        return "GEMM/convolution anchor: kept as the cuBLAS/cuDNN call eager makes."
    return (fusible_reason(node) or "kept as a torch call") + "."


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
            *[line for f in _used(run) for line in f.expected()], ""]


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


def _used(run: Run) -> list:
    """The kernel families the plan uses, in claiming order."""
    return [f for f in FAMILIES if any(g.family is f for g in run.plan.groups)]


def _what_was_fused(run: Run) -> str:
    groups = run.plan.groups
    held = list(dict.fromkeys(f.holds(g) for f in FAMILIES for g in groups if g.family is f))
    held += ["pointwise ops"] if any(g.family is None for g in groups) else []
    if not held:
        return "found nothing to put into a generated kernel"
    listed = held[0] if len(held) == 1 else ", ".join(held[:-1]) + " and " + held[-1]
    return f"put its {listed} into generated CUDA kernels"


def _measured_precision(run: Run, name: str) -> str:
    """What the GPU measured for this convolution before the layout was decided (layout_precision.py)."""
    m = run.conv_precision.get(name)
    if not m:
        return ""
    cl, nchw = m.get("error_channels_last"), m["error_nchw"]
    verdict = "kept" if m.get("channels_last_in_class") else "not taken: outside eager's bound"
    return (f" Measured on the GPU for this shape (error vs float64 relative to the output's RMS): NCHW "
            f"{nchw:.1e} ({m['class']}-class), channels-last "
            + ("n/a" if cl is None else f"{cl:.1e} ({m['class_channels_last']}-class)") + f"; channels-last {verdict}.")


def _plan_kept(run: Run) -> list[str]:
    """Which rung of the ladder of plans this is, and why the rungs above it were left."""
    if not run.ladder:
        return []
    return ["## Plan kept", "", f"The plan with {describe(run.config)}. Plans tried before it:", "",
            *[f"- {line}" for line in run.ladder], ""]


def _render_model_forward(run: Run) -> str:
    """The report of the last rung: ModelNew runs the model's own forward."""
    return "\n".join([f"# fuseforge report: {run.loaded.path.name}", "", *summary_rows(run), "", *_plan_kept(run),
                       "No operator was replaced: `ModelNew` runs the model's own forward, because no plan with "
                       "generated kernels both passed its checks and ran faster than eager (above).", ""])


def render(run: Run) -> str:
    name = run.loaded.path.name
    if run.captured is None:
        return _render_model_forward(run)
    parts = [f"# fuseforge report: {name}", "", *summary_rows(run), "", *_plan_kept(run),
             f"fuseforge captured the model as an ATen graph, {_what_was_fused(run)}, "
             "kept everything else as the torch calls eager PyTorch makes, and checked the result against a "
             "float64 run of the original model. Artefacts of each stage are next to this file "
             "(`00_captured.txt` … `60_bench.json`).", ""]
    for section in (_replaced, _fusions, _algorithmic, _unchanged, kernels_how, _expected):
        parts += section(run)
    parts += measured_section(run)
    parts += _limits(run)
    return "\n".join(parts)


def write_report(run: Run, path: Path) -> None:
    path.write_text(render(run))
