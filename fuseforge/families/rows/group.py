"""Row groups: a reduction or normalisation over the trailing axes, with the pointwise ops around it, as one kernel.

Runs after the pointwise groups are formed. Each node of the row-reduction table (`table.recognise`:
softmax, log_softmax, logsumexp, layer_norm, mean, sum, amax, amin, var, std, vector norms of order 1 and 2 over
the last axis, or over the last k axes together for all but softmax and log_softmax; softmax, log_softmax and
logsumexp also over the channel axis of [N, C, *S], a row per (n, s)) becomes a row group, which then takes in neighbouring
pointwise groups (the prologue that computes the reduced value, the epilogues that read its result, and
groups feeding those) while the whole stays a row group:

- convex (no path leaves the group and comes back);
- every member has the *row shape* F (the reduced tensor's shape: one value per element) or the
  *per-row shape* (F with the reduced axes 1 or dropped: one value per row, computed after the reduction);
  the prologue (what the reduction reads) has the row shape;
- every external input is float32 and, broadcast as torch does, *full* (shape F), *per-column* (constant
  along the leading axes: [..., C]; or [C, 1, 1] against rows of [C, H, W]), *per-row* (constant along the
  reduced axes: [N, C, 1, 1], or [C, 1, 1] against rows of [H, W]; `row-flat`: broadcast against the
  per-row shape without the reduced axes, read only by per-row members of that shape) or a *scalar*.
  The binding expands a broadcast per-row or per-column input to one value per row or column;
- at least one input is full (it gives the kernel its rows at run time); outputs are float32.

One reduction per group. Whenever a neighbour stays apart, the reason is recorded (WhyNotFused).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import fx

from ...partition_family import GroupGrower, edge_notes, notes_outside
from ...plan import Claim
from ...pointwise import NotSpellable
from ...traced import tensor_meta, traced_shape
from . import table
from .table import RowReduction

OPERAND_CLASSES = ("full", "col", "row", "row-flat", "scalar")


@dataclass(frozen=True)
class RowSpec:
    """How a row kernel sees its group: the reduction, its operands' classes and its per-row members."""

    anchor: str  # the reduction or normalisation node
    reduction: RowReduction
    operands: tuple[tuple[str, str], ...]  # (input, class): full, col, row, row-flat or scalar
    row_nodes: tuple[str, ...]  # members with one value per row (the anchor too, if its value is per row)
    full_shape: tuple  # the row shape F (symbolic sizes as names)

    def operand_class(self, name: str) -> str:
        return dict(self.operands)[name]

    def with_operand_order(self, inputs: tuple[str, ...]) -> RowSpec:
        return RowSpec(self.anchor, self.reduction, tuple((i, self.operand_class(i)) for i in inputs), self.row_nodes,
                       self.full_shape)


def broadcasts(shape, to) -> bool:
    """Whether `shape` broadcasts to `to` as torch broadcasts (right-aligned, size-1 axes stretched)."""
    return len(shape) <= len(to) and all(a == 1 or a == b for a, b in zip(reversed(shape), reversed(to)))


def _operand_class(shape: tuple, full: tuple, reduced: tuple[int, ...], flat: bool) -> str | None:
    """The class of an input of `shape` read by an op of the row shape F (`flat` False) or of the per-row
    shape without the reduced axes (`flat` True): broadcasting as torch does (shapes right-aligned)."""
    kept = tuple(d for a, d in enumerate(full) if a not in reduced)
    frame = kept if flat else full
    if len(shape) > len(frame):
        return None
    shape = (1,) * (len(frame) - len(shape)) + tuple(shape)
    if all(d == 1 for d in shape):
        return "scalar"
    if flat:
        return "row-flat" if broadcasts(shape, frame) else None
    if shape == full:
        return "full"
    along = [a in reduced for a in range(len(full))]
    if broadcasts(shape, full) and all(d == 1 for d, r in zip(shape, along) if r):
        return "row"
    if broadcasts(shape, full) and all(d == 1 for d, r in zip(shape, along) if not r):
        return "col"
    return None


def per_row_shapes(full: tuple, reduced: tuple[int, ...]) -> tuple[tuple, tuple]:
    """The per-row shape with the reduced axes kept (size 1), and without them."""
    kept = tuple(1 if a in reduced else d for a, d in enumerate(full))
    return kept, tuple(d for a, d in enumerate(full) if a not in reduced)


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
        elif shape in per_row_shapes(full, red.reduced(len(full))) and anchor.name not in below[name]:
            kinds[name] = "row"
        else:
            return (f"{name} has shape {list(shape)}: a row kernel computes values of the row shape "
                    f"{list(full)} (before or after the reduction) or one per row (after it)")
    return kinds


def _check_operands(members, kinds, anchor: str, red: RowReduction, by_name) -> dict[str, str] | str:
    """The class of every external input; or why one cannot be read by a row kernel."""
    full = traced_shape(by_name[red.data])
    reduced = red.reduced(len(full))
    keep, flat = per_row_shapes(full, reduced)
    classes: dict[str, str] = {}
    for name in members:
        kind = "element" if name == anchor else kinds[name]  # the reduction reads its operands per element
        in_flat = kind == "row" and name != anchor and traced_shape(by_name[name]) == flat
        for arg in by_name[name].all_input_nodes:
            if arg.name in members:
                if kind == "row" and kinds[arg.name] == "element":
                    return f"{name} has one value per row but reads {arg.name}, which has one per element"
                if kinds[arg.name] == "row" and not in_flat and traced_shape(arg) != keep:
                    return f"{arg.name} has one value per row without keepdim: it does not broadcast along the row"
                continue
            meta = tensor_meta(arg)
            if meta is None or meta.dtype != torch.float32:
                return f"input {arg.name} of {name} has dtype {getattr(meta, 'dtype', None)}; row kernels read float32"
            cls = _operand_class(traced_shape(arg), full, reduced, in_flat)
            if cls is None:
                return (f"input {arg.name} of shape {list(traced_shape(arg))} broadcasts neither per element, per row, "
                        f"per column nor as a scalar against the row shape {list(full)}"
                        + (f" (rows {red.over})" if red.axes > 1 or red.channels else ""))
            if kind == "row" and cls not in ("row", "row-flat", "scalar"):
                return f"{name} cannot read {arg.name} of shape {list(traced_shape(arg))} in a row kernel"
            if classes.get(arg.name, cls) != cls:
                return (f"{arg.name} of shape {list(traced_shape(arg))} is read both with and without the reduced "
                        "axes, which broadcast it differently")
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
    classes = _check_operands(order, kinds, anchor.name, red, by_name)
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


def form_row_groups(claim: Claim, pointwise_groups: list[list[str]], not_fused: list):
    """Row groups grown from `pointwise_groups`: returns (pointwise groups left, [(row members, RowSpec)]);
    `not_fused` is updated: entries about row-group members are replaced by the row groups' own."""
    graph, reach = claim.graph, claim.reach
    grower = GroupGrower(claim, pointwise_groups)
    for node in graph.nodes:
        if not table.is_row_op(node) or node.name in claim.claimed:  # claimed: a conv kernel's spatial sum
            continue
        try:
            red = table.recognise_kernel(node)
        except NotSpellable:
            continue
        grown = grower.grow(node.name, {node.name},
                            lambda members, node=node, red=red: row_spec(members, node, red, grower.by_name, reach))
        if grown:
            grower.formed.append(grown)
    row_of = grower.group_of()
    not_fused[:] = notes_outside(not_fused, row_of) + \
        edge_notes(grower, lambda i, other, after: _edge_reason(grower, i, other, row_of))
    return grower.untaken(pointwise_groups), grower.formed
