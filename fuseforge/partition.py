"""Stage `partition`: decide which ops become one generated kernel and which stay torch calls.

Kinds of kernel:
- pointwise: every maximal set of pointwise ops between anchors that can run as one elementwise loop
  (chains, multi-input chains, broadcasts of vectors and scalars, anchor epilogues). Its outputs share
  one iteration shape; every op inside it broadcasts to it.
- a kernel family's kernel (`fuseforge/families/`): an anchor (a reduction, a norm, a GEMM) with the
  pointwise groups around it that the family can compute with it; the families claim anchors in the
  registry's order (`families.FAMILIES`), after each family's `claim_first` (the groups it must form before
  earlier families take their ops: a convolution that sums its epilogue over the spatial axes).
Other anchors (those of no family in the plan, convolutions, views) stay torch calls.
Whenever two neighbours end up apart, the reason is recorded (`WhyNotFused`).

The planner emits the plain dataclasses of `plan.py`; codegen only prints them.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch
from torch import fx

from .fusible import fusible_reason, unwrap_getitem
from .plan import Claim, Family, KernelGroup, KernelStep, Plan, TorchStep, WhyNotFused
from .traced import tensor_meta


class _Reach:
    """Descendant sets of every node, for the convexity test."""

    def __init__(self, graph: fx.Graph):
        self.below: dict[str, set[str]] = {}
        for node in reversed(list(graph.nodes)):
            below = set()
            for user in node.users:
                below.add(user.name)
                below |= self.below[user.name]
            self.below[node.name] = below

    def convex(self, group: set[str]) -> bool:
        """No path leaves the group and comes back."""
        outside_below = set()
        for g in group:
            outside_below |= self.below[g] - group
        return not any(self.below[m] & group for m in outside_below)


def _outputs(group: set[str], by_name: dict[str, fx.Node]) -> list[str]:
    return [n for n in group if any(u.name not in group for u in by_name[n].users)]


def _shape_of(name: str, by_name) -> tuple:
    """The node's shape; symbolic sizes as their names ('s0')."""
    return tuple(s if isinstance(s, int) else str(s) for s in tensor_meta(by_name[name]).shape)


def _acceptable(group: set[str], by_name, reach: _Reach) -> str | None:
    if not reach.convex(group):
        return "fusing would create a cycle through an op outside the kernel"
    outs = _outputs(group, by_name)
    shapes = {_shape_of(o, by_name) for o in outs}
    if len(shapes) > 1:
        return f"outputs would have different shapes {sorted(map(list, shapes), key=str)}"
    if any(tensor_meta(by_name[o]).dtype != torch.float32 for o in outs):
        return "a kernel output would not be float32"
    return None


def _group_nodes(graph: fx.Graph, not_fused: list[WhyNotFused], torch_reason) -> list[list[str]]:
    by_name = {n.name: n for n in graph.nodes}
    reach = _Reach(graph)
    group_of: dict[str, int] = {}
    groups: dict[int, set[str]] = {}
    next_id = 0
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        reason = torch_reason(node)
        if reason is not None:
            for arg in node.all_input_nodes:
                if arg.name in group_of:
                    not_fused.append(WhyNotFused(arg.name, node.name, reason))
            continue
        gid = next_id  # not len(groups): merged groups are popped, so a length can name a live group
        next_id += 1
        groups[gid] = {node.name}
        group_of[node.name] = gid
        for arg in node.all_input_nodes:
            other = group_of.get(arg.name)
            if other is None:
                if arg.op == "call_function":
                    producer = unwrap_getitem(arg)
                    not_fused.append(WhyNotFused(producer.name, node.name, torch_reason(producer) or "?"))
                continue
            if other == group_of[node.name]:
                continue
            merged = groups[other] | groups[group_of[node.name]]
            why = _acceptable(merged, by_name, reach)
            if why is not None:
                not_fused.append(WhyNotFused(arg.name, node.name, why))
                continue
            old = group_of[node.name]
            for n in groups.pop(old):
                group_of[n] = other
            groups[other] = merged
    _keep_float32_boundaries(groups, by_name, not_fused)
    order = {n.name: i for i, n in enumerate(graph.nodes)}
    return [sorted(g, key=order.__getitem__) for g in groups.values()]


def _dtype(name: str, by_name) -> torch.dtype | None:
    meta = tensor_meta(by_name[name])
    return None if meta is None else meta.dtype


def _keep_float32_boundaries(groups: dict[int, set[str]], by_name, not_fused: list[WhyNotFused]) -> None:
    """A kernel reads and writes float32 memory only. A mask (`x > c`) may live inside a kernel, but a group that
    would write one for a torch op (`x[x > c] = c`: the mask is an index), or read one another group could not keep
    in registers, leaves its ops as torch calls; so, in turn, may a group reading what such an op writes."""
    changed = True
    while changed:
        changed = False
        for gid, members in list(groups.items()):
            notes = [WhyNotFused(n, user.name, f"{n} is a {_dtype(n, by_name)} value a torch op reads; kernels "
                                               f"write float32")
                     for n in _outputs(members, by_name) if _dtype(n, by_name) != torch.float32
                     for user in by_name[n].users if user.name not in members]
            notes += [WhyNotFused(arg.name, n, f"{arg.name} is a {_dtype(arg.name, by_name)} tensor in memory; "
                                               f"kernels read float32")
                      for n in members for arg in by_name[n].all_input_nodes
                      if arg.name not in members and _dtype(arg.name, by_name) not in (torch.float32, None)]
            if notes:
                not_fused.extend(notes)
                del groups[gid]
                changed = True


def _kernel_name(nodes: list[str], by_name, taken: set[str]) -> str:
    ops = []
    for n in nodes:
        if by_name[n].target is operator.getitem:
            continue
        op = str(by_name[n].target).split(".")[1].removeprefix("_native_").removesuffix("_legit_functional")
        op = op.removesuffix("_legit")
        if not ops or ops[-1] != op:
            ops.append(op)
    base = "fused_" + "_".join(ops[:6]) + ("_etc" if len(ops) > 6 else "")
    name, i = base, 2
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


def _make_group(nodes: list[str], by_name, taken: set[str], family: Family | None = None, spec=None) -> KernelGroup:
    members = set(nodes)
    inputs: list[str] = []
    for n in nodes:
        for arg in by_name[n].all_input_nodes:
            if arg.name not in members and arg.name not in inputs:
                inputs.append(arg.name)
    outputs = [n for n in nodes if any(u.name not in members for u in by_name[n].users)]
    shape = spec.full_shape if spec else _shape_of(outputs[0], by_name)
    spec = spec.with_operand_order(tuple(inputs)) if spec else None  # operand classes in the order of the inputs
    return KernelGroup(_kernel_name(nodes, by_name, taken), tuple(nodes), tuple(inputs), tuple(outputs), shape,
                       family, spec)


def _schedule(graph: fx.Graph, groups: list[KernelGroup]) -> list[TorchStep | KernelStep]:
    """Topological order of torch calls and kernels, as close to the original order as possible."""
    by_name = {n.name: n for n in graph.nodes}
    owner = {n: g for g in groups for n in g.nodes}
    units: dict[str, TorchStep | KernelStep] = {}
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        units.setdefault(owner[node.name].name if node.name in owner else node.name,
                         KernelStep(owner[node.name]) if node.name in owner else TorchStep(node.name))

    def unit_of(name: str) -> str | None:
        if name in owner:
            return owner[name].name
        return name if name in units else None

    deps = {u: set() for u in units}
    for key, unit in units.items():
        members = unit.group.nodes if isinstance(unit, KernelStep) else (unit.node,)
        for m in members:
            for arg in by_name[m].all_input_nodes:
                dep = unit_of(arg.name)
                if dep is not None and dep != key:
                    deps[key].add(dep)
    first = {}
    for i, node in enumerate(graph.nodes):
        u = unit_of(node.name)
        if u is not None:
            first.setdefault(u, i)
    done: list[str] = []
    pending = sorted(units, key=first.__getitem__)
    while pending:
        ready = next(u for u in pending if deps[u] <= set(done))
        done.append(ready)
        pending.remove(ready)
    return [units[u] for u in done]


def partition(graph: fx.Graph, families: Sequence[Family] = (), pointwise_kernels: bool = True,
              every_kernel: bool = False) -> Plan:
    """The plan of GRAPH: pointwise groups, then each of `families` in turn (the registry's order) takes anchors
    with their pointwise neighbours out of them. Without `pointwise_kernels` (and no family), every op stays a
    torch call. With `every_kernel`, a family takes every anchor its kernel can take, whatever the cost model
    expects of it (for testing the kernels on shapes where cuDNN or cuBLAS would be kept)."""
    if not pointwise_kernels:
        if families:
            raise ValueError("kernel families need the pointwise kernels")
        return Plan(_schedule(graph, []), [], [])
    not_fused: list[WhyNotFused] = []
    by_name = {n.name: n for n in graph.nodes}
    order = {n.name: i for i, n in enumerate(graph.nodes)}
    taken: set[str] = set()
    torch_reason = lambda node: fusible_reason(node, families)  # noqa: E731
    pointwise_groups = _group_nodes(graph, not_fused, torch_reason)
    reach = _Reach(graph)
    claimed: list[tuple[set[str], Family, object]] = []
    standing: list[tuple[set[str], list[WhyNotFused]]] = []  # a family's members and its notes, which stand
    for family, first in [(f, True) for f in families] + [(f, False) for f in families]:  # claim_first, then claim
        members_before = {n for members, _, _ in claimed for n in members}
        claim = Claim(graph, reach, frozenset(members_before), torch_reason, every_kernel)
        pointwise_groups, formed = (family.claim_first if first else family.claim)(claim, pointwise_groups, not_fused)
        if first and not formed:
            continue
        if family.notes_stand:
            standing.append(({n for members, _ in formed for n in members}, list(not_fused)))
        claimed += [(members, family, spec) for members, spec in formed]
    for members, notes in standing:
        if members:
            touches = lambda w, members=members: w.producer in members or w.consumer in members  # noqa: E731
            not_fused[:] = [w for w in not_fused if not touches(w)] + [w for w in notes if touches(w)]
    units = [(nodes, None, None) for nodes in pointwise_groups]
    units += [(sorted(members, key=order.__getitem__), family, spec) for members, family, spec in claimed]
    units.sort(key=lambda unit: order[unit[0][0]])
    groups = [_make_group(nodes, by_name, taken, family, spec) for nodes, family, spec in units]
    return Plan(_schedule(graph, groups), groups, not_fused)


def format_plan(plan: Plan) -> str:
    """The `20_partition.txt` artefact."""
    lines = ["# steps, in execution order"]
    for step in plan.steps:
        if isinstance(step, KernelStep):
            g = step.group
            lines.append(f"kernel {g.name}: {' -> '.join(g.nodes)}")
            if g.family is not None:
                lines += g.family.describe(g)
            else:
                lines.append(f"    reads {', '.join(g.inputs)}; writes {', '.join(g.outputs)}; "
                             f"iteration shape {list(g.shape)}")
        else:
            layout = "  (channels-last input and weight: its readers read NHWC)" if step.node in plan.channels_last else ""
            lines.append(f"torch  {step.node}{layout}")
    lines.append("")
    lines.append("# why neighbours were not fused")
    for w in plan.not_fused:
        lines.append(f"{w.producer} -> {w.consumer}: {w.reason}")
    if not plan.not_fused:
        lines.append("(every pair of neighbouring ops was fused)")
    return "\n".join(lines) + "\n"
