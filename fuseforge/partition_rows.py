"""Row groups: a reduction or normalisation over the last axis, with the pointwise ops around it, as one kernel.

Runs after the pointwise groups are formed. Each node of the row-reduction table (`rowwise.recognise`:
softmax, log_softmax, logsumexp, layer_norm, mean, sum, amax, amin over the last axis) becomes a row
group, which then takes in neighbouring pointwise groups (the prologue that computes the reduced value,
the epilogues that read its result, and groups feeding those) while the whole stays a row group:

- convex (no path leaves the group and comes back);
- every member has the *row shape* F (the reduced tensor's shape: one value per element) or the
  *per-row shape* (F with the last axis 1 or dropped: one value per row, computed after the reduction);
  the prologue (what the reduction reads) has the row shape;
- every external input is *full* (shape F), *per-column* ([..., C] with leading ones), *per-row*
  (F with the last axis 1; or dropped, read only by per-row members) or a *scalar*, and float32;
- at least one input is full (it gives the kernel its rows at run time); outputs are float32.

One reduction per group. Whenever a neighbour stays apart, the reason is recorded (WhyNotFused).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
from torch import fx

from . import rowwise
from .pointwise import NotSpellable
from .rowwise import RowReduction

OPERAND_CLASSES = ("full", "col", "row", "scalar")


@dataclass(frozen=True)
class RowSpec:
    """How a row kernel sees its group: the reduction, its operands' classes and its per-row members."""

    anchor: str  # the reduction or normalisation node
    reduction: RowReduction
    operands: tuple[tuple[str, str], ...]  # (input, class): full, col, row or scalar
    row_nodes: tuple[str, ...]  # members with one value per row (the anchor too, if its value is per row)
    full_shape: tuple  # the row shape F (symbolic sizes as names)

    def operand_class(self, name: str) -> str:
        return dict(self.operands)[name]


def _meta(node: fx.Node):
    val = node.meta.get("val")
    return val if isinstance(val, torch.Tensor) else None


def _shape(node: fx.Node) -> tuple:
    return tuple(s if isinstance(s, int) else str(s) for s in _meta(node).shape)


def _operand_class(shape: tuple, full: tuple) -> str | None:
    if shape == full:
        return "full"
    if shape == full[:-1] + (1,) or shape == full[:-1]:
        return "row"
    if all(d == 1 for d in shape):
        return "scalar"
    if len(shape) <= len(full) and shape[-1] == full[-1] and all(d == 1 for d in shape[:-1]):
        return "col"
    return None


def _kinds(members: list[str], anchor: fx.Node, red: RowReduction, by_name, below) -> dict[str, str] | str:
    """Each member's kind, `element` or `row`; or why a member fits neither."""
    full = _shape(by_name[red.data])
    kinds = {}
    for name in members:
        if name == anchor.name:
            kinds[name] = "element" if red.per_element else "row"
            continue
        node = by_name[name]
        meta = _meta(node)
        if meta is None or meta.dtype not in (torch.float32, torch.bool):
            return f"{name} has dtype {getattr(meta, 'dtype', None)}; row kernels compute float32"
        shape = _shape(node)
        if shape == full:
            kinds[name] = "element"
        elif shape in (full[:-1] + (1,), full[:-1]) and anchor.name not in below[name]:
            kinds[name] = "row"
        else:
            return (f"{name} has shape {list(shape)}: a row kernel computes values of the row shape "
                    f"{list(full)} (before or after the reduction) or one per row (after it)")
    return kinds


def _check_operands(members, kinds, anchor: str, full, by_name) -> dict[str, str] | str:
    """The class of every external input; or why one cannot be read by a row kernel."""
    keep = full[:-1] + (1,)
    classes: dict[str, str] = {}
    for name in members:
        kind = "element" if name == anchor else kinds[name]  # the reduction reads its operands per element
        for arg in by_name[name].all_input_nodes:
            if arg.name in members:
                if kind == "row" and kinds[arg.name] == "element":
                    return f"{name} has one value per row but reads {arg.name}, which has one per element"
                if kind == "element" and kinds[arg.name] == "row" and _shape(arg) != keep:
                    return f"{arg.name} has one value per row without keepdim: it does not broadcast along the row"
                continue
            meta = _meta(arg)
            if meta is None or meta.dtype != torch.float32:
                return f"input {arg.name} of {name} has dtype {getattr(meta, 'dtype', None)}; row kernels read float32"
            cls = _operand_class(_shape(arg), full)
            if cls is None:
                return (f"input {arg.name} of shape {list(_shape(arg))} broadcasts neither per element, per row, "
                        f"per column nor as a scalar against the row shape {list(full)}")
            if (kind == "row" and cls not in ("row", "scalar")) or \
                    (kind == "element" and cls == "row" and _shape(arg) != keep):
                return f"{name} cannot read {arg.name} of shape {list(_shape(arg))} in a row kernel"
            classes[arg.name] = cls
    if "full" not in classes.values():
        return "no input of the kernel has the row shape (it gives the kernel its rows)"
    return classes


def row_spec(members: set[str], anchor: fx.Node, red: RowReduction, by_name, reach) -> RowSpec | str:
    """The group's RowSpec, or why `members` cannot be one row kernel."""
    if not reach.convex(members):
        return "fusing would create a cycle through an op outside the kernel"
    order = [n for n in by_name if n in members]
    kinds = _kinds(order, anchor, red, by_name, reach.below)
    if isinstance(kinds, str):
        return kinds
    full = _shape(by_name[red.data])
    classes = _check_operands(order, kinds, anchor.name, full, by_name)
    if isinstance(classes, str):
        return classes
    for name in order:
        if any(u.name not in members for u in by_name[name].users) and _meta(by_name[name]).dtype != torch.float32:
            return f"a kernel output ({name}) would not be float32"
    return RowSpec(anchor.name, red, tuple(classes.items()), tuple(n for n in order if kinds[n] == "row"), full)


@dataclass
class _RowGroup:
    members: set[str]
    spec: RowSpec


class _Former:
    """Grows one row group per recognised anchor from the pointwise groups around it."""

    def __init__(self, graph: fx.Graph, pointwise_groups: list[list[str]], reach):
        self.by_name = {n.name: n for n in graph.nodes}
        self.reach = reach
        self.groups = pointwise_groups
        self.owner = {n: i for i, g in enumerate(pointwise_groups) for n in g}
        self.taken: dict[int, int] = {}  # pointwise group -> row group that absorbed it
        self.rejected: dict[int, str] = {}  # pointwise group -> why its last try failed
        self.rows: list[_RowGroup] = []
        self.anchor_reasons: dict[str, str] = {}  # recognised anchors that cannot be a row kernel at all
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

    def grow(self, anchor: fx.Node, red: RowReduction) -> None:
        spec = row_spec({anchor.name}, anchor, red, self.by_name, self.reach)
        if isinstance(spec, str):
            self.anchor_reasons[anchor.name] = spec
            return
        members = {anchor.name}
        changed = True
        while changed:
            changed = False
            for gi in self._neighbour_groups(members):
                candidate = members | set(self.groups[gi])
                result = row_spec(candidate, anchor, red, self.by_name, self.reach)
                if isinstance(result, str):
                    self.rejected[gi] = result
                    continue
                members, spec, changed = candidate, result, True
                self.taken[gi] = len(self.rows)
                self.rejected.pop(gi, None)
        self.rows.append(_RowGroup(members, spec))


def _edge_reason(former: _Former, member_group: int, other: fx.Node, row_of: dict[str, int]) -> str | None:
    name = other.name
    if name in row_of:
        if row_of[name] == member_group:
            return None
        anchors = sorted({former.rows[member_group].spec.anchor, former.rows[row_of[name]].spec.anchor},
                         key=former.position.__getitem__)
        return f"in the row kernels of {anchors[0]} and of {anchors[1]}: a row kernel holds one reduction"
    gi = former.owner.get(name)
    if gi is not None:
        return former.rejected.get(gi, "not tried") if gi not in former.taken else None
    if other.op != "call_function":
        return None
    from .partition import fusible_reason  # the reason a torch call stays one

    producer = other.args[0] if other.target is operator.getitem else other
    return fusible_reason(producer) or "stays a torch call"


def form_row_groups(graph: fx.Graph, pointwise_groups: list[list[str]], not_fused: list, reach, why_cls):
    """Row groups grown from `pointwise_groups`: returns (pointwise groups left, [(row members, RowSpec)]);
    `not_fused` is updated: entries about row-group members are replaced by the row groups' own."""
    former = _Former(graph, pointwise_groups, reach)
    for node in graph.nodes:
        if not rowwise.is_row_op(node):
            continue
        try:
            red = rowwise.recognise(node)
        except NotSpellable:
            continue
        former.grow(node, red)
    row_of = {n: i for i, r in enumerate(former.rows) for n in r.members}
    kept = [w for w in not_fused if w.producer not in row_of and w.consumer not in row_of]
    seen = set()
    for i, group in enumerate(former.rows):
        for name in sorted(group.members, key=former.position.__getitem__):
            node = former.by_name[name]
            for arg in node.all_input_nodes:
                why = _edge_reason(former, i, arg, row_of) if arg.name not in group.members else None
                if why and (arg.name, name) not in seen:
                    seen.add((arg.name, name))
                    kept.append(why_cls(arg.name, name, why))
            for user in node.users:
                why = _edge_reason(former, i, user, row_of) if user.name not in group.members else None
                if why and (name, user.name) not in seen:
                    seen.add((name, user.name))
                    kept.append(why_cls(name, user.name, why))
    not_fused[:] = kept
    left = [g for gi, g in enumerate(pointwise_groups) if gi not in former.taken]
    return left, [(r.members, r.spec) for r in former.rows]


def row_op_reason(node: fx.Node) -> str | None:
    """Why a node of the row-reduction table is not a row kernel (None when it is one)."""
    try:
        rowwise.recognise(node)
    except NotSpellable as exc:
        return str(exc)
    return None
