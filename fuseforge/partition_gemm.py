"""GEMM groups: a matrix product with the pointwise chain after it, as one tensor-core kernel (opt-in).

Runs first among the families (before row and channel groups): an epilogue inside the GEMM saves the
write and read-back of the product itself, which a row or channel kernel after it cannot; a reduction or
norm after the GEMM then reads the epilogue's result instead of the raw product, at the same cost.

Each anchor (`recognise`: aten.linear, addmm, mm, matmul with 2-D operands, or bmm, all float32) becomes a
GEMM group, which then takes in neighbouring pointwise groups while the whole stays a GEMM group:

- convex (no path leaves the group and comes back);
- the GEMM's operands A and B are not members: the tensor-core main loop reads them from memory (no
  prologue fusion);
- every other member is pointwise (the pointwise table), float32 or bool, and its shape broadcasts to the
  GEMM's output shape F ([..., M, N] as traced); every output of the group has shape F and is float32;
- every external input of the epilogue is float32 and *full* (shape F), *per-row* (F with the last axis 1),
  *per-column* ([N] with leading ones) or a *scalar* (all ones); the anchor's own bias (linear's bias,
  addmm's input) is read the same way.

One GEMM per group. The epilogue is evaluated per output element (batch, row, col) on the accumulator.
Whenever a neighbour stays apart, the reason is recorded (WhyNotFused).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
from torch import fx

from . import pointwise

OPERAND_CLASSES = ("full", "row", "col", "scalar")
MIN_TILE_SIDE = 16  # a static M or N below this stays a torch call (GEMV-like shapes)
GEMM_OPS = {"aten.linear.default": "linear", "aten.addmm.default": "addmm", "aten.mm.default": "mm",
            "aten.matmul.default": "matmul", "aten.bmm.default": "bmm"}


@dataclass(frozen=True)
class GemmAnchor:
    """What the GEMM computes: out = alpha * (A @ B) + beta * bias, B given as [N, K] (linear) or [K, N]."""

    op: str  # linear, addmm, mm, matmul or bmm
    a: str  # [M, K] (linear: [..., K]), or [batch, M, K] for bmm
    b: str  # linear: the weight [N, K]; otherwise [K, N] (bmm: [batch, K, N])
    bias: str | None  # linear's bias or addmm's input, read by the epilogue
    alpha: float = 1.0
    beta: float = 1.0
    batched: bool = False
    b_transposed: bool = True  # TN: B is read as [N, K] rows (from the traced strides); else NN: [K, N] rows

    @property
    def layout(self) -> str:
        return "TN" if self.b_transposed else "NN"


@dataclass(frozen=True)
class GemmSpec:
    """How a GEMM kernel sees its group: the anchor, its epilogue operands' classes."""

    anchor: str
    gemm: GemmAnchor
    operands: tuple[tuple[str, str], ...]  # (epilogue input, class): full, row, col or scalar
    full_shape: tuple  # the GEMM's output shape F (symbolic sizes as names)

    def operand_class(self, name: str) -> str | None:
        return dict(self.operands).get(name)


def _meta(node) -> torch.Tensor | None:
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


def _shape(node: fx.Node) -> tuple:
    return tuple(s if isinstance(s, int) else str(s) for s in _meta(node).shape)


def is_gemm_op(node: fx.Node) -> bool:
    return node.op == "call_function" and str(node.target) in GEMM_OPS


def _stride(node: fx.Node, dim: int):
    try:
        return int(_meta(node).stride()[dim])
    except (TypeError, ValueError, RuntimeError):
        return None


def _args(node: fx.Node) -> dict:
    return pointwise.bind_arguments(node, lambda n: n)


def recognise(node: fx.Node) -> GemmAnchor | str:
    """The anchor's GEMM, or why it cannot be a GEMM kernel."""
    op = GEMM_OPS[str(node.target)]
    a = _args(node)
    x, w = {"linear": ("input", "weight"), "addmm": ("mat1", "mat2"), "matmul": ("self", "other")}.get(op, ("self", "mat2"))
    x, w = a[x], a[w]
    bias = a.get("bias") if op == "linear" else a.get("self") if op == "addmm" else None
    for role, t in (("A", x), ("B", w), ("bias", bias)):
        if t is None and role == "bias":
            continue
        if not isinstance(t, fx.Node) or _meta(t) is None:
            return f"{op}'s {role} is not a tensor"
        if _meta(t).dtype != torch.float32:
            return f"{op}'s {role} ({t.name}) has dtype {_meta(t).dtype}; the 3xTF32 GEMM reads float32"
    if _meta(node) is None or _meta(node).dtype != torch.float32:
        return f"{node.name} is not float32"
    ranks = (_meta(x).dim(), _meta(w).dim())
    if op == "bmm":
        if ranks != (3, 3):
            return f"bmm of ranks {ranks}"
    elif op == "linear":
        if ranks[0] < 2 or ranks[1] != 2:
            return f"linear of an input of rank {ranks[0]} (a GEMV: one row)" if ranks[0] < 2 else \
                f"linear with a weight of rank {ranks[1]}"
    elif ranks != (2, 2):
        return f"{op} of operands of ranks {ranks}: the GEMM kernel takes 2-D operands (bmm: 3-D)"
    out = _shape(node)
    thin = [(axis, d) for axis, d in (("M", out[-2]), ("N", out[-1])) if isinstance(d, int) and d < MIN_TILE_SIDE]
    if thin:
        return (f"{thin[0][0]} = {thin[0][1]} is below {MIN_TILE_SIDE}: a GEMV-like product would leave most of "
                "each 128 x 128 tile empty (cuBLAS stays)")
    if op == "addmm" and any(not isinstance(a[k], (int, float)) for k in ("beta", "alpha")):
        return "addmm with non-numeric alpha or beta"
    # B as [.., K, N]: TN when its K axis is the contiguous one (a transposed [N, K] matrix, such as
    # linear's weight or bmm(q, k.transpose(1, 2))); the binding copies B when the run-time strides differ.
    if op == "linear":
        transposed = _stride(w, -1) == 1 or _stride(w, -2) != 1
    else:
        transposed = _stride(w, -2) == 1 and _stride(w, -1) != 1
    return GemmAnchor(op, x.name, w.name, bias.name if isinstance(bias, fx.Node) else None,
                      float(a.get("alpha", 1.0)), float(a.get("beta", 1.0)), op == "bmm", transposed)


def operand_class(shape: tuple, full: tuple) -> str | None:
    """How an epilogue input of `shape` broadcasts against F: full, row, col or scalar (None: none)."""
    if shape == full:
        return "full"
    if all(d == 1 for d in shape):
        return "scalar"
    if len(shape) > len(full):
        return None
    padded = (1,) * (len(full) - len(shape)) + tuple(shape)
    if padded[-1] == full[-1] and all(d == 1 for d in padded[:-1]):
        return "col"
    if padded == full[:-1] + (1,):
        return "row"
    return None


def _broadcasts_to(shape: tuple, full: tuple) -> bool:
    if len(shape) > len(full):
        return False
    padded = (1,) * (len(full) - len(shape)) + tuple(shape)
    return all(d == 1 or d == f for d, f in zip(padded, full))


def _check_members(order: list[str], anchor: fx.Node, gemm: GemmAnchor, full: tuple, by_name) -> str | None:
    for operand in (gemm.a, gemm.b):
        if operand in order:
            return (f"{operand} is an operand of the GEMM: the tensor-core main loop reads it from memory "
                    "(no prologue fusion)")
    for name in order:
        if name == anchor.name:
            continue
        node = by_name[name]
        meta = _meta(node)
        if meta is None or meta.dtype not in (torch.float32, torch.bool):
            return f"{name} has dtype {getattr(meta, 'dtype', None)}; the GEMM epilogue computes float32"
        if not _broadcasts_to(_shape(node), full):
            return (f"{name} has shape {list(_shape(node))}, which does not broadcast to the GEMM's output "
                    f"{list(full)}: the epilogue computes one value per output element")
    return None


def _check_operands(order: list[str], anchor: fx.Node, gemm: GemmAnchor, full: tuple, by_name) -> dict | str:
    members = set(order)
    classes: dict[str, str] = {}
    for name in order:
        reads = [gemm.bias] if name == anchor.name else [a.name for a in by_name[name].all_input_nodes]
        for arg in reads:
            if arg is None or arg in members:
                continue
            meta = _meta(by_name[arg])
            if meta is None or meta.dtype != torch.float32:
                return f"input {arg} of {name} has dtype {getattr(meta, 'dtype', None)}; the epilogue reads float32"
            cls = operand_class(_shape(by_name[arg]), full)
            if cls is None:
                return (f"input {arg} of shape {list(_shape(by_name[arg]))} broadcasts neither per element, per "
                        f"row, per column nor as a scalar against the GEMM's output {list(full)}")
            classes[arg] = cls
    return classes


def gemm_spec(members: set[str], anchor: fx.Node, gemm: GemmAnchor, by_name, reach) -> GemmSpec | str:
    """The group's GemmSpec, or why `members` cannot be one GEMM kernel."""
    if not reach.convex(members):
        return "fusing would create a cycle through an op outside the kernel"
    full = _shape(anchor)
    order = [n for n in by_name if n in members]
    why = _check_members(order, anchor, gemm, full, by_name)
    if why:
        return why
    classes = _check_operands(order, anchor, gemm, full, by_name)
    if isinstance(classes, str):
        return classes
    for name in order:
        if any(u.name not in members for u in by_name[name].users):
            if _meta(by_name[name]).dtype != torch.float32 or _shape(by_name[name]) != full:
                return (f"a kernel output ({name}) would not be float32 of the GEMM's output shape "
                        f"{list(full)}")
    return GemmSpec(anchor.name, gemm, tuple(classes.items()), full)


@dataclass
class _GemmGroup:
    members: set[str]
    spec: GemmSpec


class _Former:
    """Grows one GEMM group per recognised anchor from the pointwise groups around it."""

    def __init__(self, graph: fx.Graph, pointwise_groups: list[list[str]], reach):
        self.by_name = {n.name: n for n in graph.nodes}
        self.reach = reach
        self.groups = pointwise_groups
        self.owner = {n: i for i, g in enumerate(pointwise_groups) for n in g}
        self.taken: set[int] = set()
        self.rejected: dict[int, str] = {}
        self.gemms: list[_GemmGroup] = []
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

    def grow(self, anchor: fx.Node, gemm: GemmAnchor) -> None:
        members = {anchor.name}
        spec = gemm_spec(members, anchor, gemm, self.by_name, self.reach)
        if isinstance(spec, str):
            self.anchor_reasons[anchor.name] = spec
            return
        changed = True
        while changed:
            changed = False
            for gi in self._neighbour_groups(members):
                candidate = members | set(self.groups[gi])
                result = gemm_spec(candidate, anchor, gemm, self.by_name, self.reach)
                if isinstance(result, str):
                    self.rejected[gi] = result
                    continue
                members, spec, changed = candidate, result, True
                self.taken.add(gi)
                self.rejected.pop(gi, None)
        self.gemms.append(_GemmGroup(members, spec))


def _edge_reason(former: _Former, group: int, other: fx.Node, gemm_of: dict[str, int], after: bool) -> str | None:
    """Why `other` (a consumer of the group when `after`, else a producer) stays out of GEMM group `group`."""
    name = other.name
    if name in gemm_of:
        anchors = sorted({former.gemms[group].spec.anchor, former.gemms[gemm_of[name]].spec.anchor},
                         key=former.position.__getitem__)
        return f"in the GEMM kernels of {anchors[0]} and of {anchors[1]}: a GEMM kernel holds one GEMM"
    gi = former.owner.get(name)
    if gi is not None:
        return former.rejected.get(gi, "not tried")
    if other.op != "call_function":
        return None
    producer = other.args[0] if other.target is operator.getitem else other
    if producer.name in former.gemms[group].members:
        return None
    if not after:
        from .partition import fusible_reason  # the reason a torch call stays one

        why = fusible_reason(producer) or "stays a torch call"
        if producer.name in former.anchor_reasons:
            why = f"{why.removesuffix(' (stays a torch call)')}, nor a GEMM kernel: {former.anchor_reasons[producer.name]}"
        return why
    return (f"{pointwise.op_key(producer)} is not pointwise: a GEMM kernel's epilogue computes pointwise ops "
            "element by element (a reduction, norm or other anchor after the GEMM reads its whole output)")


def form_gemm_groups(graph: fx.Graph, pointwise_groups: list[list[str]], not_fused: list, reach, why_cls):
    """GEMM groups grown from `pointwise_groups`: returns (pointwise groups left, [(members, GemmSpec)]);
    `not_fused` is updated: entries about GEMM-group members are replaced by the GEMM groups' own, and a
    GEMM that cannot be a GEMM kernel gets its reason."""
    former = _Former(graph, pointwise_groups, reach)
    for node in graph.nodes:
        if not is_gemm_op(node):
            continue
        gemm = recognise(node)
        if isinstance(gemm, str):
            former.anchor_reasons[node.name] = gemm
            continue
        former.grow(node, gemm)
    gemm_of = {n: i for i, g in enumerate(former.gemms) for n in g.members}
    kept = []
    for w in not_fused:
        if w.producer in gemm_of or w.consumer in gemm_of:
            continue
        anchor = next((n for n in (w.producer, w.consumer) if n in former.anchor_reasons), None)
        if anchor is not None and w.reason.endswith("is not pointwise (stays a torch call)"):
            w = why_cls(w.producer, w.consumer, f"{w.reason.removesuffix(' (stays a torch call)')}, nor a GEMM "
                                                f"kernel: {former.anchor_reasons[anchor]}")
        kept.append(w)
    seen = set()
    for i, group in enumerate(former.gemms):
        for name in sorted(group.members, key=former.position.__getitem__):
            node = former.by_name[name]
            edges = [(arg, (arg.name, name), False) for arg in node.all_input_nodes] + \
                    [(user, (name, user.name), True) for user in node.users]
            for other, pair, after in edges:
                why = _edge_reason(former, i, other, gemm_of, after) if other.name not in group.members else None
                if why and pair not in seen:
                    seen.add(pair)
                    kept.append(why_cls(*pair, why))
    not_fused[:] = kept
    left = [g for gi, g in enumerate(pointwise_groups) if gi not in former.taken]
    return left, [(g.members, g.spec) for g in former.gemms]


def gemm_op_reason(node: fx.Node) -> str | None:
    """Why a GEMM op is not a GEMM kernel by itself (None when it can be one)."""
    gemm = recognise(node)
    return gemm if isinstance(gemm, str) else None
