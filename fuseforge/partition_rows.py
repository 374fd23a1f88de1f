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

from dataclasses import dataclass

import torch
from torch import fx

from . import rowwise
from .partition_family import (
    GroupGrower,
    edge_notes,
    notes_outside,
    recognise_reason,
    tensor_meta,
    traced_shape,
)
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
    full = traced_shape(by_name[red.data])
    kinds = {}
    for name in members:
        if name == anchor.name:
            kinds[name] = "element" if red.per_element else "row"
            continue
        node = by_name[name]
        meta = tensor_meta(node)
        if meta is None or meta.dtype not in (torch.float32, torch.bool):
            return f"{name} has dtype {getattr(meta, 'dtype', None)}; row kernels compute float32"
        shape = traced_shape(node)
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
                if kind == "element" and kinds[arg.name] == "row" and traced_shape(arg) != keep:
                    return f"{arg.name} has one value per row without keepdim: it does not broadcast along the row"
                continue
            meta = tensor_meta(arg)
            if meta is None or meta.dtype != torch.float32:
                return f"input {arg.name} of {name} has dtype {getattr(meta, 'dtype', None)}; row kernels read float32"
            cls = _operand_class(traced_shape(arg), full)
            if cls is None:
                return (f"input {arg.name} of shape {list(traced_shape(arg))} broadcasts neither per element, per row, "
                        f"per column nor as a scalar against the row shape {list(full)}")
            if (kind == "row" and cls not in ("row", "scalar")) or \
                    (kind == "element" and cls == "row" and traced_shape(arg) != keep):
                return f"{name} cannot read {arg.name} of shape {list(traced_shape(arg))} in a row kernel"
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
    full = traced_shape(by_name[red.data])
    classes = _check_operands(order, kinds, anchor.name, full, by_name)
    if isinstance(classes, str):
        return classes
    for name in order:
        if any(u.name not in members for u in by_name[name].users) and tensor_meta(by_name[name]).dtype != torch.float32:
            return f"a kernel output ({name}) would not be float32"
    return RowSpec(anchor.name, red, tuple(classes.items()), tuple(n for n in order if kinds[n] == "row"), full)


def _edge_reason(grower: GroupGrower, mine: int, other: fx.Node, row_of: dict[str, int]) -> str | None:
    if other.name in row_of:
        return grower.two_anchors_reason(mine, row_of[other.name], "row kernels", "a row kernel holds one reduction")
    return grower.outside_reason(other)


def form_row_groups(graph: fx.Graph, pointwise_groups: list[list[str]], not_fused: list, reach, why_cls):
    """Row groups grown from `pointwise_groups`: returns (pointwise groups left, [(row members, RowSpec)]);
    `not_fused` is updated: entries about row-group members are replaced by the row groups' own."""
    grower = GroupGrower(graph, pointwise_groups, reach)
    for node in graph.nodes:
        if not rowwise.is_row_op(node):
            continue
        try:
            red = rowwise.recognise(node)
        except NotSpellable:
            continue
        grown = grower.grow(node.name, {node.name},
                            lambda members, node=node, red=red: row_spec(members, node, red, grower.by_name, reach))
        if grown:
            grower.formed.append(grown)
    row_of = grower.group_of()
    not_fused[:] = notes_outside(not_fused, row_of) + \
        edge_notes(grower, lambda i, other, after: _edge_reason(grower, i, other, row_of), why_cls)
    return grower.untaken(pointwise_groups), grower.formed


def row_op_reason(node: fx.Node) -> str | None:
    """Why a node of the row-reduction table is not a row kernel (None when it is one)."""
    return recognise_reason(rowwise.recognise, node)
