"""GEMM groups: a matrix product with the pointwise chain after it, as one tensor-core kernel.

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

import math
from dataclasses import dataclass

import torch
from torch import fx

from ... import pointwise, rates
from ...partition_family import (
    GroupGrower,
    edge_notes,
    epilogue_edge_reason,
    notes_outside,
    restate_anchor_notes,
)
from ...plan import Claim
from ...traced import size_hint, tensor_meta, traced_shape
from ..base import EpilogueOperands, broadcasts_to

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
class GemmSpec(EpilogueOperands):
    """How a GEMM kernel sees its group: the anchor, its epilogue operands' classes."""

    anchor: str
    gemm: GemmAnchor
    operands: tuple[tuple[str, str], ...]  # (epilogue input, class): full, row, col or scalar
    full_shape: tuple  # the GEMM's output shape F (symbolic sizes as names)


def is_gemm_op(node: fx.Node) -> bool:
    return node.op == "call_function" and str(node.target) in GEMM_OPS


def _stride(node: fx.Node, dim: int):
    try:
        return int(tensor_meta(node).stride()[dim])
    except (TypeError, ValueError, RuntimeError):
        return None


def _args(node: fx.Node) -> dict:
    return pointwise.bind_arguments(node, lambda n: n)


def recognise(node: fx.Node, every_kernel: bool = False) -> GemmAnchor | str:
    """The anchor's GEMM, or why it cannot be a GEMM kernel (with `every_kernel`, even where cuBLAS is expected
    faster)."""
    op = GEMM_OPS[str(node.target)]
    a = _args(node)
    x, w = {"linear": ("input", "weight"), "addmm": ("mat1", "mat2"), "matmul": ("self", "other")}.get(op, ("self", "mat2"))
    x, w = a[x], a[w]
    bias = a.get("bias") if op == "linear" else a.get("self") if op == "addmm" else None
    for role, t in (("A", x), ("B", w), ("bias", bias)):
        if t is None and role == "bias":
            continue
        if not isinstance(t, fx.Node) or tensor_meta(t) is None:
            return f"{op}'s {role} is not a tensor"
        if tensor_meta(t).dtype != torch.float32:
            return f"{op}'s {role} ({t.name}) has dtype {tensor_meta(t).dtype}; the 3xTF32 GEMM reads float32"
    if tensor_meta(node) is None or tensor_meta(node).dtype != torch.float32:
        return f"{node.name} is not float32"
    ranks = (tensor_meta(x).dim(), tensor_meta(w).dim())
    if op == "bmm":
        if ranks != (3, 3):
            return f"bmm of ranks {ranks}"
    elif op == "linear":
        if ranks[0] < 2 or ranks[1] != 2:
            return f"linear of an input of rank {ranks[0]} (a GEMV: one row)" if ranks[0] < 2 else \
                f"linear with a weight of rank {ranks[1]}"
    elif ranks != (2, 2):
        return f"{op} of operands of ranks {ranks}: the GEMM kernel takes 2-D operands (bmm: 3-D)"
    out = traced_shape(node)
    thin = [(axis, d) for axis, d in (("M", out[-2]), ("N", out[-1])) if isinstance(d, int) and d < MIN_TILE_SIDE]
    if thin:
        return (f"{thin[0][0]} = {thin[0][1]} is below {MIN_TILE_SIDE}: a GEMV-like product would leave most of "
                "each 128 x 128 tile empty (cuBLAS stays)")
    # B as [.., K, N]: TN when its K axis is the contiguous one (a transposed [N, K] matrix, such as
    # linear's weight or bmm(q, k.transpose(1, 2))). The kernel reads B as [N, K] rows (its TMA loads are of
    # K-major tiles): the binding copies an NN product's B, and B whose run-time strides differ, to those rows.
    if op == "linear":
        transposed = _stride(w, -1) == 1 or _stride(w, -2) != 1
    else:
        transposed = _stride(w, -2) == 1 and _stride(w, -1) != 1
    slower = None if every_kernel else _slower_than_cublas(node, x, copies_b=not transposed)
    if slower:
        return slower
    if op == "addmm" and any(not isinstance(a[k], (int, float)) for k in ("beta", "alpha")):
        return "addmm with non-numeric alpha or beta"
    return GemmAnchor(op, x.name, w.name, bias.name if isinstance(bias, fx.Node) else None,
                      float(a.get("alpha", 1.0)), float(a.get("beta", 1.0)), op == "bmm", transposed)


def traced_sizes(node: fx.Node, a: fx.Node) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of a GEMM node with A operand `a`, at the traced sizes."""
    out = [size_hint(s) for s in tensor_meta(node).shape]
    return math.prod(out[:-2]), out[-2], out[-1], size_hint(tensor_meta(a).shape[-1])


def _slower_than_cublas(node: fx.Node, a: fx.Node, copies_b: bool = False) -> str | None:
    """Why our kernel is not expected GEMM3X_MARGIN times faster than cuBLAS, if it is not (at the traced
    sizes; typically a grid of few tiles over a long K, which cuBLAS splits). cuBLAS's side also pays what an
    epilogue saves: the round trip of its product through memory and the launch of the kernel after it. Ours
    pays the copy of an NN product's B to [N, K] rows."""
    batch, m, n, k = traced_sizes(node, a)
    ours = rates.gemm3x_seconds(batch, m, n, k, copies_b)
    theirs = rates.sgemm_seconds(batch, m, n, k) + 2 * 4 * batch * m * n / rates.BANDWIDTH + rates.LAUNCH_S
    if ours * rates.GEMM3X_MARGIN <= theirs:
        return None
    tiles = batch * math.ceil(m / rates.GEMM3X_TILE) * math.ceil(n / rates.GEMM3X_TILE)
    return (f"{tiles} output tiles of {rates.GEMM3X_TILE} x {rates.GEMM3X_TILE} over K = {k}: expected "
            f"{ours * 1e3:.3f} ms in our kernel ({math.ceil(tiles / rates.SMS)} wave(s) over {rates.SMS} SMs) vs "
            f"{theirs * 1e3:.3f} ms for cuBLAS, its product's round trip and a launch; a GEMM kernel must be expected "
            f"{rates.GEMM3X_MARGIN}x faster (cuBLAS stays)")


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


def _check_members(order: list[str], anchor: fx.Node, gemm: GemmAnchor, full: tuple, by_name) -> str | None:
    for operand in (gemm.a, gemm.b):
        if operand in order:
            return (f"{operand} is an operand of the GEMM: the tensor-core main loop reads it from memory "
                    "(no prologue fusion)")
    for name in order:
        if name == anchor.name:
            continue
        node = by_name[name]
        meta = tensor_meta(node)
        if meta is None or meta.dtype not in (torch.float32, torch.bool):
            return f"{name} has dtype {getattr(meta, 'dtype', None)}; the GEMM epilogue computes float32"
        if not broadcasts_to(traced_shape(node), full):
            return (f"{name} has shape {list(traced_shape(node))}, which does not broadcast to the GEMM's output "
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
            meta = tensor_meta(by_name[arg])
            if meta is None or meta.dtype != torch.float32:
                return f"input {arg} of {name} has dtype {getattr(meta, 'dtype', None)}; the epilogue reads float32"
            cls = operand_class(traced_shape(by_name[arg]), full)
            if cls is None:
                return (f"input {arg} of shape {list(traced_shape(by_name[arg]))} broadcasts neither per element, per "
                        f"row, per column nor as a scalar against the GEMM's output {list(full)}")
            classes[arg] = cls
    return classes


def gemm_spec(members: set[str], anchor: fx.Node, gemm: GemmAnchor, by_name, reach) -> GemmSpec | str:
    """The group's GemmSpec, or why `members` cannot be one GEMM kernel."""
    if not reach.convex(members):
        return "fusing would create a cycle through an op outside the kernel"
    full = traced_shape(anchor)
    order = [n for n in by_name if n in members]
    why = _check_members(order, anchor, gemm, full, by_name)
    if why:
        return why
    classes = _check_operands(order, anchor, gemm, full, by_name)
    if isinstance(classes, str):
        return classes
    for name in order:
        if any(u.name not in members for u in by_name[name].users):
            if tensor_meta(by_name[name]).dtype != torch.float32 or traced_shape(by_name[name]) != full:
                return (f"a kernel output ({name}) would not be float32 of the GEMM's output shape "
                        f"{list(full)}")
    return GemmSpec(anchor.name, gemm, tuple(classes.items()), full)


def form_gemm_groups(claim: Claim, pointwise_groups: list[list[str]], not_fused: list):
    """GEMM groups grown from `pointwise_groups`: returns (pointwise groups left, [(members, GemmSpec)]);
    `not_fused` is updated: entries about GEMM-group members are replaced by the GEMM groups' own, and a
    GEMM that cannot be a GEMM kernel gets its reason."""
    graph, reach = claim.graph, claim.reach
    grower = GroupGrower(claim, pointwise_groups)
    for node in graph.nodes:
        if not is_gemm_op(node):
            continue
        gemm = recognise(node, claim.every_kernel)
        if isinstance(gemm, str):
            grower.anchor_reasons[node.name] = gemm
            continue
        grown = grower.grow(node.name, {node.name}, lambda members, node=node, gemm=gemm:
                            gemm_spec(members, node, gemm, grower.by_name, reach))
        if grown:
            grower.formed.append(grown)
    gemm_of = grower.group_of()
    kept = restate_anchor_notes(notes_outside(not_fused, gemm_of), grower.anchor_reasons, "GEMM")
    not_fused[:] = kept + edge_notes(
        grower, lambda i, other, after: epilogue_edge_reason(
            grower, i, other, gemm_of, after, "GEMM", "a GEMM kernel holds one GEMM",
            "a GEMM kernel's epilogue computes pointwise ops element by element (a reduction, norm or other anchor "
            "after the GEMM reads its whole output)"))
    return grower.untaken(pointwise_groups), grower.formed


def gemm_op_reason(node: fx.Node) -> str | None:
    """Why a GEMM op is not a GEMM kernel by itself (None when it can be one)."""
    gemm = recognise(node)
    return gemm if isinstance(gemm, str) else None
