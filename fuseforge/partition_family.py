"""What the kernel families' partitioners share (rows, channel norms, channel reductions, GEMMs).

Each family grows one group per anchor (a reduction, a norm, a GEMM) by taking in the neighbouring
pointwise groups while its own check still accepts the whole (`GroupGrower`), then replaces the not-fused
notes about its members by its own: one per edge that leaves a group (`edge_notes`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable

from torch import fx

from . import pointwise
from .plan import Claim, WhyNotFused
from .pointwise import NotSpellable


def recognise_reason(recognise: Callable, node: fx.Node) -> str | None:
    """Why `recognise(node)` refuses the node (None when it takes it)."""
    try:
        recognise(node)
    except NotSpellable as exc:
        return str(exc)
    return None


class GroupGrower:
    """Grows groups around anchors from `units` (the pointwise groups, and any family-specific units after
    them); `formed` holds the grown groups as (members, spec)."""

    def __init__(self, claim: Claim, units: list[list[str]]):
        self.by_name = {n.name: n for n in claim.graph.nodes}
        self.reach = claim.reach
        self.torch_reason = claim.torch_reason  # why a node stays a torch call
        self.units = units
        self.owner = {n: i for i, g in enumerate(units) for n in g}
        self.taken: set[int] = set()  # units absorbed into a group
        self.rejected: dict[int, str] = {}  # unit -> why its last try failed
        self.formed: list[tuple[set[str], object]] = []
        self.anchor_reasons: dict[str, str] = {}  # recognised anchors that cannot be a kernel at all
        self.position = {name: i for i, name in enumerate(self.by_name)}

    def _neighbour_units(self, members: set[str]) -> list[int]:
        found = []
        for name in members:
            node = self.by_name[name]
            for other in [*node.all_input_nodes, *node.users]:
                gi = self.owner.get(other.name)
                if gi is not None and gi not in self.taken and gi not in found:
                    found.append(gi)
        return sorted(found, key=lambda gi: min(self.position[n] for n in self.units[gi]))

    def grow(self, anchor: str, members: set[str], spec_of: Callable) -> tuple[set[str], object] | None:
        """`members` grown by every neighbouring unit that `spec_of` (members -> spec, or why not) accepts,
        with its spec; None, the reason recorded, when `spec_of` refuses `members` themselves."""
        spec = spec_of(members)
        if isinstance(spec, str):
            self.anchor_reasons[anchor] = spec
            return None
        changed = True
        while changed:
            changed = False
            for gi in self._neighbour_units(members):
                candidate = members | set(self.units[gi])
                result = spec_of(candidate)
                if isinstance(result, str):
                    self.rejected[gi] = result
                    continue
                members, spec, changed = candidate, result, True
                self.taken.add(gi)
                self.rejected.pop(gi, None)
        return members, spec

    def group_of(self) -> dict[str, int]:
        """Each member's index into `formed`."""
        return {n: i for i, (members, _) in enumerate(self.formed) for n in members}

    def two_anchors_reason(self, mine: int, theirs: int, kernels: str, holds: str) -> str:
        """Why a node of formed group `theirs` stays out of group `mine`: `kernels` hold one anchor each."""
        anchors = sorted({self.formed[mine][1].anchor, self.formed[theirs][1].anchor}, key=self.position.__getitem__)
        return f"in the {kernels} of {anchors[0]} and of {anchors[1]}: {holds}"

    def outside_reason(self, other: fx.Node, anchor_reason: Callable | None = None) -> str | None:
        """Why `other`, in no formed group, stays out: its unit's last rejection, or why a torch call stays
        one (`anchor_reason(name)` for a producer among `anchor_reasons`, where given); None otherwise."""
        gi = self.owner.get(other.name)
        if gi is not None:
            return self.rejected.get(gi, "not tried") if gi not in self.taken else None
        if other.op != "call_function":
            return None
        producer = other.args[0] if other.target is operator.getitem else other
        if anchor_reason is not None and producer.name in self.anchor_reasons:
            return anchor_reason(producer.name)
        return self.torch_reason(producer) or "stays a torch call"

    def untaken(self, pointwise_groups: list[list[str]]) -> list[list[str]]:
        """The pointwise groups (the first units) that no group took in."""
        return [g for gi, g in enumerate(pointwise_groups) if gi not in self.taken]


def edge_notes(grower: GroupGrower, edge_reason: Callable) -> list[WhyNotFused]:
    """One not-fused note per edge between a member of a formed group
    and a node outside it, where `edge_reason(group, other, after)` gives a reason (`after`: `other` reads
    the member); the first note of each edge wins."""
    notes, seen = [], set()
    for i, (members, _) in enumerate(grower.formed):
        for name in sorted(members, key=grower.position.__getitem__):
            node = grower.by_name[name]
            edges = [(arg, (arg.name, name), False) for arg in node.all_input_nodes] + \
                    [(user, (name, user.name), True) for user in node.users]
            for other, pair, after in edges:
                why = edge_reason(i, other, after) if other.name not in members else None
                if why and pair not in seen:
                    seen.add(pair)
                    notes.append(WhyNotFused(*pair, why))
    return notes


def notes_outside(not_fused: list, group_of: dict[str, int]) -> list:
    """The not-fused notes about no member of a formed group."""
    return [w for w in not_fused if w.producer not in group_of and w.consumer not in group_of]


def restate_anchor_notes(notes: list, anchor_reasons: dict[str, str], family: str) -> list[WhyNotFused]:
    """`notes`, where one says an anchor that could not be a `family` kernel is not pointwise, with why."""
    restated = []
    for w in notes:
        anchor = next((n for n in (w.producer, w.consumer) if n in anchor_reasons), None)
        if anchor is not None and w.reason.endswith("is not pointwise (stays a torch call)"):
            w = WhyNotFused(w.producer, w.consumer, f"{w.reason.removesuffix(' (stays a torch call)')}, nor a {family} "
                                                     f"kernel: {anchor_reasons[anchor]}")
        restated.append(w)
    return restated


def epilogue_edge_reason(grower: GroupGrower, group: int, other: fx.Node, anchor_of: dict[str, int], after: bool,
                         family: str, holds: str, after_reason: str) -> str | None:
    """Why `other` (a consumer of group `group` when `after`, else a producer) stays out of the group of a family
    whose kernel is an anchor with a pointwise epilogue (GEMM, convolution): `family` names its kernels ("GEMM"),
    `holds` says why two anchors do not share one, `after_reason` why a non-pointwise consumer stays out."""
    name = other.name
    if name in anchor_of:
        return grower.two_anchors_reason(group, anchor_of[name], f"{family} kernels", holds)
    gi = grower.owner.get(name)
    if gi is not None:
        return grower.rejected.get(gi, "not tried")
    if other.op != "call_function":
        return None
    producer = other.args[0] if other.target is operator.getitem else other
    if producer.name in grower.formed[group][0]:
        return None
    if not after:
        why = grower.torch_reason(producer) or "stays a torch call"
        if producer.name in grower.anchor_reasons:
            why = (f"{why.removesuffix(' (stays a torch call)')}, nor a {family} kernel: "
                   f"{grower.anchor_reasons[producer.name]}")
        return why
    if pointwise.is_pointwise(producer):  # pointwise, but a family planned before this one took it
        return f"{pointwise.op_key(producer)} is computed in another kernel, which took it first"
    return f"{pointwise.op_key(producer)} is not pointwise: {after_reason}"
