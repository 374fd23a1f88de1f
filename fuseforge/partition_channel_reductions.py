"""Channel-reduction groups: amin/amax/sum/mean over the channel axis with the pointwise ops around it, as one kernel.

Runs after the channel-norm groups (same flag, `--channel-kernels`). Each node of the channel-reduction
table (`channel_reductions.recognise`: amin, amax, sum, mean, min.dim / max.dim values over axis 1 of
[N, C, *spatial]) becomes a group with the tuple access of its values, and then takes in neighbouring
pointwise groups (the prologue that computes the reduced value, the epilogue that reads the result, and
groups feeding those) while the whole stays one channel-reduction kernel:

- convex (no path leaves the group and comes back);
- every member before the reduction (the prologue) has the reduced tensor's shape F = [N, C, *spatial]
  and is read only inside the kernel; every member after it (the epilogue) has the result's shape
  R = [N, 1, *spatial] or [N, *spatial] (one value per (sample, position));
- every external input is *full* (shape F), *per-channel* (C at axis 1 of F, ones elsewhere) or a
  *scalar* for the prologue; *reduced* (shape R) or a scalar for the epilogue; float32, one class each;
- at least one input is full (it gives the kernel N, C and the spatial size); outputs are float32 of shape R.

One reduction per group; one launch: each thread reduces the C values of its (sample, position),
strided by the spatial size, so consecutive threads read consecutive positions. Whenever a neighbour
stays apart, the reason is recorded (WhyNotFused).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
from torch import fx

from . import channel_reductions
from .channel_reductions import ChannelReduction
from .partition_channels import operand_class
from .pointwise import NotSpellable, op_key

OPERAND_CLASSES = ("full", "channel", "scalar", "reduced")


@dataclass(frozen=True)
class ChannelReduceSpec:
    """How a channel-reduction kernel sees its group: the reduction, its operands' classes, its epilogue."""

    anchor: str  # the reduction node
    reduction: ChannelReduction
    operands: tuple[tuple[str, str], ...]  # (input, class): full, channel, scalar or reduced
    reduced_nodes: tuple[str, ...]  # members with one value per (sample, position): the result and the epilogue
    full_shape: tuple  # F: the reduced tensor's shape (symbolic sizes as names)
    out_shape: tuple  # R: the result's shape

    def operand_class(self, name: str) -> str:
        return dict(self.operands)[name]

    def describe_lines(self, outputs: tuple[str, ...]) -> list[str]:
        """The plan artefact's lines for this kernel."""
        red = self.reduction
        epilogue = [n for n in self.reduced_nodes if n not in (self.anchor, red.values)]
        after = f"; then {', '.join(epilogue)} per (sample, position)" if epilogue else ""
        return [f"    channel-reduction kernel: {red.op} of {red.data} over axis 1 of {list(self.full_shape)} -> "
                f"{list(self.out_shape)}{after}",
                f"    reads {', '.join(f'{i} ({c})' for i, c in self.operands)}; writes {', '.join(outputs)}"]

    def with_operand_order(self, inputs: tuple[str, ...]) -> ChannelReduceSpec:
        return ChannelReduceSpec(self.anchor, self.reduction, tuple((i, self.operand_class(i)) for i in inputs),
                                 self.reduced_nodes, self.full_shape, self.out_shape)


def _meta(node: fx.Node):
    val = node.meta.get("val")
    return val if isinstance(val, torch.Tensor) else None


def _shape(node: fx.Node) -> tuple:
    return tuple(s if isinstance(s, int) else str(s) for s in _meta(node).shape)


def _out_shape(red: ChannelReduction, full: tuple) -> tuple:
    return (full[0], 1, *full[2:]) if red.keepdim else (full[0], *full[2:])


def _kinds(order: list[str], anchor: fx.Node, red: ChannelReduction, full, out, by_name, below) -> dict | str:
    """Each member's kind: `anchor`, `element` (prologue, shape F) or `reduced` (result and epilogue, shape R)."""
    kinds = {}
    for name in order:
        if name == anchor.name:
            kinds[name] = "anchor"
            continue
        meta = _meta(by_name[name])
        if meta is None or meta.dtype not in (torch.float32, torch.bool):
            return f"{name} has dtype {getattr(meta, 'dtype', None)}; channel kernels compute float32"
        after = name in below[anchor.name]
        want = out if after else full
        if _shape(by_name[name]) != want:
            where = "after the reduction: one value per (sample, position)" if after else \
                "before the reduction: the reduced tensor's shape"
            return f"{name} has shape {list(_shape(by_name[name]))}, not {list(want)} ({where})"
        kinds[name] = "reduced" if after else "element"
    return kinds


def _check_operands(order, kinds, anchor: str, red: ChannelReduction, full, out, by_name) -> dict[str, str] | str:
    """The class of every external input; or why one cannot be read by the kernel."""
    classes: dict[str, str] = {}
    for name in order:
        after = kinds[name] == "reduced"
        for arg in by_name[name].all_input_nodes:
            if arg.name in kinds:
                if after and kinds[arg.name] == "element":
                    return f"{name} reads the prologue value {arg.name} after the reduction"
                continue
            meta = _meta(arg)
            if meta is None or meta.dtype != torch.float32:
                return f"input {arg.name} of {name} has dtype {getattr(meta, 'dtype', None)}; channel kernels read float32"
            shape = _shape(arg)
            if after:
                cls = "reduced" if shape == out else "scalar" if all(d == 1 for d in shape) else None
            else:
                cls = operand_class(shape, full)
            if cls is None:
                target = f"the result's shape {list(out)}" if after else f"the reduced tensor's shape {list(full)}"
                return f"input {arg.name} of shape {list(shape)} does not broadcast as the kernel reads it against {target}"
            if classes.get(arg.name, cls) != cls:
                return f"{arg.name} would be read both as {classes[arg.name]} and as {cls}"
            classes[arg.name] = cls
    if "full" not in classes.values():
        return "no input of the kernel has the reduced tensor's shape (it gives the kernel N, C and the spatial size)"
    return classes


def reduce_spec(members: set[str], anchor: fx.Node, red: ChannelReduction, by_name, reach) -> ChannelReduceSpec | str:
    """The group's ChannelReduceSpec, or why `members` cannot be one channel-reduction kernel."""
    if not reach.convex(members):
        return "fusing would create a cycle through an op outside the kernel"
    full = _shape(by_name[red.data])
    out = _out_shape(red, full)
    order = [n for n in by_name if n in members]
    kinds = _kinds(order, anchor, red, full, out, by_name, reach.below)
    if isinstance(kinds, str):
        return kinds
    classes = _check_operands(order, kinds, anchor.name, red, full, out, by_name)
    if isinstance(classes, str):
        return classes
    for name in order:
        if name == anchor.name and red.values:
            continue  # the (values, indices) tuple: read by its values access only
        if any(u.name not in members for u in by_name[name].users):
            if kinds[name] == "element":
                return (f"{name} (of the reduced tensor's shape) is read outside the kernel: a channel reduction "
                        "writes one value per (sample, position)")
            if _meta(by_name[name]).dtype != torch.float32:
                return f"a kernel output ({name}) would not be float32"
    reduced = tuple(n for n in order if kinds[n] == "reduced" or (n == anchor.name and not red.values))
    return ChannelReduceSpec(anchor.name, red, tuple(classes.items()), reduced, full, out)


class _Former:
    """Grows one channel-reduction group per recognised reduction from the pointwise groups around it."""

    def __init__(self, graph: fx.Graph, pointwise_groups: list[list[str]], reach):
        self.by_name = {n.name: n for n in graph.nodes}
        self.reach = reach
        self.groups = pointwise_groups
        self.owner = {n: i for i, g in enumerate(pointwise_groups) for n in g}
        self.taken: set[int] = set()
        self.rejected: dict[int, str] = {}
        self.formed: list[tuple[set[str], ChannelReduceSpec]] = []
        self.anchor_reasons: dict[str, str] = {}
        self.position = {name: i for i, name in enumerate(self.by_name)}

    def _neighbour_groups(self, members: set[str]) -> list[int]:
        found = []
        for name in members:
            node = self.by_name[name]
            for other in [*node.all_input_nodes, *node.users]:
                gi = self.owner.get(other.name)
                if gi is not None and gi not in self.taken and gi not in found:
                    found.append(gi)
        return sorted(found, key=lambda gi: min(self.position[n] for n in self.groups[gi]))

    def grow(self, anchor: fx.Node, red: ChannelReduction) -> None:
        members = {anchor.name, *([red.values] if red.values else [])}
        spec = reduce_spec(members, anchor, red, self.by_name, self.reach)
        if isinstance(spec, str):
            self.anchor_reasons[anchor.name] = spec
            return
        changed = True
        while changed:
            changed = False
            for gi in self._neighbour_groups(members):
                candidate = members | set(self.groups[gi])
                result = reduce_spec(candidate, anchor, red, self.by_name, self.reach)
                if isinstance(result, str):
                    self.rejected[gi] = result
                    continue
                members, spec, changed = candidate, result, True
                self.taken.add(gi)
                self.rejected.pop(gi, None)
        self.formed.append((members, spec))


def _edge_reason(former: _Former, mine: int, other: fx.Node, group_of: dict[str, int], elsewhere: set[str]) -> str | None:
    name = other.name
    if name in group_of:
        if group_of[name] == mine:
            return None
        anchors = sorted({former.formed[mine][1].anchor, former.formed[group_of[name]][1].anchor},
                         key=former.position.__getitem__)
        return f"in the channel-reduction kernels of {anchors[0]} and of {anchors[1]}: a kernel holds one reduction"
    if name in elsewhere:
        return "in a row or channel-norm kernel: a kernel holds one reduction"
    gi = former.owner.get(name)
    if gi is not None:
        return former.rejected.get(gi, "not tried") if gi not in former.taken else None
    if other.op != "call_function":
        return None
    from .partition import fusible_reason  # the reason a torch call stays one

    producer = other.args[0] if other.target is operator.getitem else other
    return fusible_reason(producer) or "stays a torch call"


def _anchor_reason(reason: str, anchor: str, former: _Former) -> str:
    op = op_key(former.by_name[anchor])
    return f"{op} is not pointwise, nor a channel kernel: {former.anchor_reasons[anchor]}"


def form_channel_reduction_groups(graph: fx.Graph, pointwise_groups: list[list[str]], not_fused: list, reach,
                                  why_cls, elsewhere: set[str] = frozenset()):
    """Channel-reduction groups grown from `pointwise_groups`: returns (pointwise groups left,
    [(members, ChannelReduceSpec)]); `not_fused` is updated: entries about group members are replaced by
    the groups' own, and a reduction over the channels that cannot be a kernel gets its reason.
    `elsewhere`: members of row and channel-norm groups."""
    former = _Former(graph, pointwise_groups, reach)
    for node in graph.nodes:
        if not channel_reductions.is_channel_reduction_op(node) or node.name in elsewhere:
            continue
        try:
            red = channel_reductions.recognise(node)
        except NotSpellable as exc:
            if "not the channel axis" not in str(exc) and "row reduction" not in str(exc):
                former.anchor_reasons[node.name] = str(exc)
            continue
        former.grow(node, red)
    group_of = {n: i for i, (members, _) in enumerate(former.formed) for n in members}
    kept = []
    for w in not_fused:
        if w.producer in group_of or w.consumer in group_of:
            continue
        anchor = next((n for n in (w.producer, w.consumer) if n in former.anchor_reasons), None)
        if anchor is not None and w.reason.startswith(f"{op_key(former.by_name[anchor])} is not pointwise"):
            w = why_cls(w.producer, w.consumer, _anchor_reason(w.reason, anchor, former))
        kept.append(w)
    seen = set()
    for i, (members, _) in enumerate(former.formed):
        for name in sorted(members, key=former.position.__getitem__):
            node = former.by_name[name]
            edges = [(arg, (arg.name, name)) for arg in node.all_input_nodes] + \
                    [(user, (name, user.name)) for user in node.users]
            for other, pair in edges:
                why = _edge_reason(former, i, other, group_of, elsewhere) if other.name not in members else None
                if why and pair not in seen:
                    seen.add(pair)
                    kept.append(why_cls(*pair, why))
    not_fused[:] = kept
    left = [g for gi, g in enumerate(pointwise_groups) if gi not in former.taken]
    return left, former.formed


def channel_reduction_reason(node: fx.Node) -> str | None:
    """Why a node of the channel-reduction table is not a channel-reduction kernel (None when it can be one)."""
    try:
        channel_reductions.recognise(node)
    except NotSpellable as exc:
        return str(exc)
    return None
