"""Stage `report`: `report.md`, answering the seven questions of an optimisation request for this model, and
nothing else.

Sections: a status table (checks, verdict, speedup); the plan kept, where the ladder left a rung; operators
replaced; fusions and their benefit; algorithmic changes; operators left unchanged and why; how the kernels are
implemented and called; expected speedup and memory saving (cost model, with the reason); measured on the
GPU; limits. Every line is about this model's plan: how each kind of kernel works in general is in
`docs/kernels.md`, which the report names in one line.
"""

from __future__ import annotations

import operator
from pathlib import Path
from typing import TYPE_CHECKING

from torch import fx

from .cost import VIEW_OPS, is_train_batch_norm, nbytes
from .families import FAMILIES, switched_on
from .fusible import fusible_reason
from .ladder import describe
from .layout_precision import conv_has_bias, conversion_ms, faster_channels_last, measured_ms
from .plan import KernelStep
from .pointwise import op_key
from .rates import BANDWIDTH, HOST_OP_S, LAUNCH_S, SGEMM_FLOPS
from .report_kernels import kernels_how
from .report_measured import measured_section, summary_rows
from .words import counted

if TYPE_CHECKING:
    from .run import Run

_FRIENDLY = {
    "aten._native_batch_norm_legit_functional.default": "batch_norm (train mode)",
    "aten._native_batch_norm_legit_no_training.default": "batch_norm (eval mode)",
}

_CONVS = ("aten.conv1d.default", "aten.conv2d.default", "aten.conv3d.default", "aten.conv_transpose1d.default",
          "aten.conv_transpose2d.input", "aten.conv_transpose3d.input", "aten.convolution.default")


def _op(node: fx.Node) -> str:
    """The op's short name: `linear`, `mul`, `batch_norm (train mode)`."""
    if not hasattr(node.target, "_schema"):
        return node.target.__name__
    return _FRIENDLY.get(op_key(node), op_key(node).removeprefix("aten.").split(".")[0])


def _mb(b: float) -> str:
    return f"{b / 2**20:.1f} MiB" if b >= 2**20 or not b else f"{b / 2**10:.1f} KiB"


def _by_name(run: Run) -> dict[str, fx.Node]:
    return {n.name: n for n in run.captured.graph.nodes}


def _moves_no_data(node: fx.Node) -> bool:
    return node.target is operator.getitem or str(node.target) in VIEW_OPS


def _chain(run: Run, names) -> str:
    """The ops of NAMES that compute something, as `a` → `b` (tuple accesses and views left out)."""
    nodes = [_by_name(run)[n] for n in names]
    return " → ".join(f"`{_op(n)}`" for n in nodes if not _moves_no_data(n)) or "(views only)"


def _replaced(run: Run) -> list[str]:
    lines = ["## Operators replaced", ""]
    if not run.plan.groups:
        return lines + ["None: no generated kernel was needed; every op stays the torch call eager makes (below).", ""]
    for g in run.plan.groups:
        kind, why = ("pointwise kernel", "memory-bound pointwise ops, computed in one pass") if g.family is None \
            else g.family.replaced(g)
        lines.append(f"- {_chain(run, g.nodes)} → {kind} `{g.name}`: {why}.")
    return lines + [""]


def _fusions(run: Run) -> list[str]:
    by_name = _by_name(run)
    lines = ["## Fusions and their benefit", ""]
    fused = [g for g in run.plan.groups if sum(not _moves_no_data(by_name[n]) for n in g.nodes) > 1]
    if not fused:
        return lines + ["None: no kernel holds more than one op.", ""]
    for g in fused:
        saved = _mb(2 * sum(nbytes(by_name[n]) for n in g.nodes if n not in g.outputs))
        ops = [n for n in g.nodes if not _moves_no_data(by_name[n])]
        line = g.family.fusion(g, _chain(run, ops), len(ops), saved) if g.family is not None else None
        fewer = counted(len(ops) - 1, "launch", "launches")
        lines.append(line or f"- `{g.name}` ({len(ops)} ops): {fewer} fewer and about {saved} "
                             f"less traffic per call: reads {', '.join(g.inputs)} once, writes "
                             f"{', '.join(g.outputs)} once; the intermediates stay in registers.")
    return lines + [""]


def _algorithmic(run: Run) -> list[str]:
    lines = ["## Algorithmic changes", ""]
    for f in run.rewrites.firings:
        work = [f"{f.flops_removed / 1e9:.2f} GFLOP" if f.flops_removed >= 5e6 else "",
                f"{_mb(f.bytes_removed)} of traffic" if f.bytes_removed >= 2**10 else ""]
        removed = f" Removes about {' and '.join(filter(None, work))} per call." if any(work) else ""
        lines.append(f"- **{f.rule}** at `{f.node}`: {f.identity.rstrip('.')}. Holds for {f.scope}.{removed}")
    for conv in sorted(run.plan.channels_last):
        lines.append(f"- **channels-last layout** for `{conv}`: every reader of its output reads NHWC, so the "
                     "pass converting cuDNN's output back to NCHW, which eager pays, is skipped.")
    if run.rewrites.firings:
        lines += ["", "Weights derived from parameters are recomputed from the live parameters in every forward "
                  "(training and `load_state_dict` keep working); the CPU-side check compared the rewritten program "
                  "with the model in float64."]
    if len(lines) == 2:
        dead = f"; {run.rewrites.dead_removed} dead ops removed" if run.rewrites.dead_removed else ""
        lines.append(f"None: no rewrite identity applies to this model{dead}. Results use the original formulas, "
                     "in fp32.")
    return lines + [""]


def _unchanged(run: Run) -> list[str]:
    by_name = _by_name(run)
    lines = ["## Operators left unchanged, and why", ""]
    torch_steps = [by_name[s.node] for s in run.plan.steps if not isinstance(s, KernelStep)]
    if not torch_steps:
        return lines + ["None: every op runs in a generated kernel.", ""]
    for node in (n for n in torch_steps if not _moves_no_data(n)):
        lines.append(f"- `{_op(node)}` ({node.name}): {_why_unchanged(run, node)}")
    free = [n.name for n in torch_steps if _moves_no_data(n)]
    if free:
        lines.append(f"- views and tuple accesses ({', '.join(free)}): no data is moved.")
    # An edge to or from an op that stays a torch call is explained by that op's line above.
    torch_names = {n.name for n in torch_steps}
    notes = [w for w in run.plan.not_fused
             if not ({w.producer, w.consumer} & torch_names and "is not pointwise" in w.reason)]
    if notes:
        lines += ["", "Neighbours not fused: " + "; ".join(f"{w.producer} → {w.consumer} ({w.reason})" for w in notes)
                  + "."]
    return lines + [""]


def _why_unchanged(run: Run, node: fx.Node) -> str:
    updates = [fqn for fqn, src in run.captured.buffer_mutations.items() if src == node.name]
    if updates:
        return (f"the new value of buffer `{updates[0]}`, as the original model computes it in this mode; too small "
                "to be worth a kernel.")
    if node.name in run.plan.channels_last:
        return ("convolution kept as the cuDNN call, given its input and weight channels-last (the input converted "
                "by the extension's `ff_channels_last` kernel). Precision: cuDNN picks its algorithm for this layout; "
                "the GPU verification holds it to eager's error for this shape." + _measured_precision(run, node.name))
    if str(node.target) in _CONVS:
        return (_why_torch(node, run.config) + " Precision: eager's call in eager's layout, so the same cuDNN "
                "algorithm and precision class as eager." + _measured_precision(run, node.name))
    if node.all_input_nodes and all(a.name in run.captured.state_names for a in node.all_input_nodes):
        return "derives a weight from the parameters for a rewrite above, in every forward."
    return _why_torch(node, run.config)


def _why_torch(node: fx.Node, config) -> str:
    """Why NODE stays a torch call: what a kernel family says of it (asked from the last family to claim back
    to the first: a node in two tables, such as an amin over the channel axis, is explained by the family
    that tried it last), else as an anchor or an op no kernel computes."""
    on = switched_on(config)
    for family in reversed(FAMILIES):
        why = family.why_torch(node, family in on)
        if why:
            return why
    if str(node.target) in _CONVS:
        return "no kernel family takes this convolution: kept as the cuDNN call eager makes."
    if any(k in op_key(node) for k in ("linear", "matmul", "mm")):
        return "GEMM anchor: kept as the cuBLAS call eager makes."
    reason = fusible_reason(node) or ""
    if not reason or reason.endswith("is not pointwise (stays a torch call)"):
        return "not pointwise, and no kernel family takes it: kept as the torch call eager makes."
    return reason + "."


def _measured_precision(run: Run, name: str) -> str:
    """What the GPU measured for this convolution before the layout was decided (layout_precision.py)."""
    m = run.conv_precision.get(name)
    if not m:
        return ""
    cl, nchw = m.get("error_channels_last"), m["error_nchw"]
    node = next(n for n in run.captured.graph.nodes if n.name == name)
    bias = conv_has_bias(node)
    t_nchw, t_cl = measured_ms(m, bias), measured_ms(m, bias, channels_last=True)
    if not m.get("channels_last_in_class"):
        verdict = "not taken: outside eager's bound"
    elif name in run.plan.channels_last:
        verdict = "kept"
    else:
        slower = not faster_channels_last(m, bias, conversion_ms(node))
        verdict = "not taken: measured slower" if slower else "not chosen by the layout step"
    times = "" if t_nchw is None or t_cl is None else (
        f" Time{'' if bias else ' without its bias'}: NCHW {t_nchw:.3f} ms, channels-last {t_cl:.3f} ms + "
        f"{conversion_ms(node):.3f} ms converting the input and weight.")
    return (f" Measured (error vs float64 / output RMS): NCHW {nchw:.1e} ({m['class']}-class), channels-last "
            + ("n/a" if cl is None else f"{cl:.1e} ({m['class_channels_last']}-class)") + "." + times
            + f" Channels-last {verdict}.")


def _speedup_reasons(run: Run) -> list[str]:
    c = run.cost
    reasons = [f"the plan makes {c.plan_launches} launch{'es' if c.plan_launches != 1 else ''} for eager's "
               f"{c.eager_launches} and moves "
               f"{_mb(c.plan_bytes_moved)} for eager's {_mb(c.eager_bytes_moved)}"]
    removed = sum(f.flops_removed for f in run.rewrites.firings)
    if removed >= 5e6:
        reasons.append(f"the rewrites remove {removed / 1e9:.2f} GFLOP")
    reasons += [line for f in _used(run) for line in f.expected_for([g for g in run.plan.groups if g.family is f])]
    if c.plan_host_s >= c.plan_gpu_s:
        reasons.append(f"its {c.plan_calls} calls take {c.plan_host_s * 1e3:.3f} ms to issue from Python "
                       f"({HOST_OP_S * 1e6:.0f} µs each, measured on the H100 machine), longer than its GPU work")
    if c.eager_host_s and c.eager_host_s >= c.eager_gpu_s:
        reasons.append(f"eager's {c.eager_calls} ops take {c.eager_host_s * 1e3:.3f} ms to issue from Python, "
                       "longer than their GPU work")
    if c.plan_torch_s:
        reasons.append(f"the ops left to PyTorch take {c.plan_torch_s * 1e3:.3f} ms of the plan's "
                       f"{c.plan_s * 1e3:.3f} ms, so no plan that keeps them runs more than "
                       f"{c.eager_s / c.plan_torch_s:.2f}x faster than eager")
    return reasons


def _intermediates(run: Run) -> tuple[int, int]:
    """(count, bytes) of the values computed inside kernels that are never written to memory."""
    by_name = _by_name(run)
    inside = [by_name[n] for g in run.plan.groups for n in g.nodes
              if n not in g.outputs and not _moves_no_data(by_name[n]) and nbytes(by_name[n])]
    return len(inside), sum(nbytes(n) for n in inside)


def _memory(run: Run) -> str:
    """The expected change of peak activation memory, and why."""
    c = run.cost
    count, held = _intermediates(run)
    fused = (f"the {counted(count, 'intermediate tensor')} inside the kernels ({_mb(held)}) "
             f"{'is' if count == 1 else 'are'} never allocated") if count else ""
    rewritten = "the rewrites above remove tensors eager computes" \
        if any(f.bytes_removed for f in run.rewrites.firings) else ""
    peaks = f"(peak activation memory {_mb(c.eager_peak_activation_bytes)} → {_mb(c.plan_peak_activation_bytes)})"
    if c.memory_saving >= 0.005:
        return f"Memory saving: **{c.memory_saving:.0%}** {peaks}, because {' and '.join(filter(None, (fused, rewritten)))}"
    eager, plan = _values(c.eager_peak_values), _values(c.plan_peak_values)
    where = (f"both peak while holding {plan}" if eager == plan else
             f"eager peaks while holding {eager}, the plan while holding {plan}")
    if c.memory_saving > -0.005:
        return f"Memory saving: **none** {peaks}: {where}"
    return f"Memory increase: **{-c.memory_saving:.0%}** {peaks}: {where}"


def _values(names: tuple[str, ...]) -> str:
    """Graph values, as the report names them (at most three, then how many more)."""
    shown = ", ".join(f"`{n}`" for n in names[:3])
    return (shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")) or "nothing"


def _expected(run: Run) -> list[str]:
    c = run.cost
    return ["## Expected speedup and memory saving (cost model)", "",
            f"- Speedup: **{c.speedup:.2f}x** vs eager ({c.eager_s * 1e3:.3f} ms → {c.plan_s * 1e3:.3f} ms): "
            f"{'; '.join(_speedup_reasons(run))}.",
            f"- {_memory(run)}; parameters and inputs are unchanged.",
            f"- Cost model: roofline per op ({SGEMM_FLOPS / 1e12:.0f} TFLOP/s, {BANDWIDTH / 1e12:.2f} TB/s) + "
            f"{LAUNCH_S * 1e6:.0f} µs per launch, each call issued from Python in {HOST_OP_S * 1e6:.0f} µs and its "
            "GPU work run once issued" + _measured_convs(run) + _train_batch_norms(run) + ".", ""]


def _train_batch_norms(run: Run) -> str:
    if not any(is_train_batch_norm(n) for n in run.captured.graph.nodes):
        return ""
    return ("; eager's train-mode batch norm at its cuDNN kernel's three passes over the input (statistics, then "
            "normalise), a block per channel")


def _measured_convs(run: Run) -> str:
    timed = [n for n, m in run.conv_precision.items() if isinstance(m, dict) and "ms_nchw" in m]
    return (f"; {counted(len(timed), 'convolution')} at {'its' if len(timed) == 1 else 'their'} cuDNN times "
            "measured on this GPU before planning") if timed else ""


def _limits(run: Run) -> list[str]:
    limits = ["forward only (train with `Model`; the state_dict is interchangeable)",
              "the model's constants are built into the kernels (`ModelNew` refuses other init args)"]
    if run.captured.mode_dependent:
        limits.append(f"only {'train' if run.captured.training else 'eval'} mode was compiled (the other runs the "
                      "original forward)")
    if not run.captured.dynamic_batch:
        limits.append("the batch size was kept static during capture")
    if run.captured.input_mutations:
        written = ", ".join(f"`{name}`" for name in run.captured.input_mutations)
        limits.append(f"the forward writes its input {written}: `ModelNew` writes the new value back after its calls, "
                      "as the model does")
    text = "; ".join(limits)
    return ["## Limits", "", text[0].upper() + text[1:] + ".", *[f"- {n}" for n in run.notes], ""]


def _used(run: Run) -> list:
    """The kernel families the plan uses, in claiming order."""
    return [f for f in FAMILIES if any(g.family is f for g in run.plan.groups)]


def _plan_kept(run: Run) -> list[str]:
    """Which rung of the ladder of plans this is, and why the rungs above it were left."""
    if not run.ladder:
        return []
    # `fuzz/reasons.plans_left` reads these lines: the kept plan's sentence, then one "- The plan with" per rung left
    return ["## Plan kept", "", f"The plan with {describe(run.config)}. Other plans tried:", "",
            *[f"- {line}" for line in run.ladder], ""]


def _render_model_forward(run: Run) -> str:
    """The report of the last rung: ModelNew runs the model's own forward."""
    return "\n".join([f"# fuseforge report: {run.loaded.path.name}", "", *summary_rows(run), "", *_plan_kept(run),
                      "No operator was replaced: `ModelNew` runs the model's own forward, because no plan with "
                      "generated kernels both passed its checks and ran faster than eager (above).", ""])


def render(run: Run) -> str:
    if run.captured is None:
        return _render_model_forward(run)
    parts = [f"# fuseforge report: {run.loaded.path.name}", "", *summary_rows(run), "", *_plan_kept(run)]
    for section in (_replaced, _fusions, _algorithmic, _unchanged, kernels_how, _expected, measured_section, _limits):
        parts += section(run)
    return "\n".join(parts)


def write_report(run: Run, path: Path) -> None:
    path.write_text(render(run))
