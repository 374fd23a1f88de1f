"""The row-reduction table: reductions and normalisations over the trailing axes that a row kernel computes
(softmax, log_softmax, logsumexp, layer_norm, mean, sum, amax, amin, var, std, vector norms of order 1 and 2).

A row is the trailing axes a node reduces, flattened: over the last axis (softmax(x, -1)), or over the last
k axes together (x.mean((2, 3)) of [N, C, H, W]: N*C rows of H*W values; LayerNorm over [C, H, W]). On a
contiguous tensor the row's values are adjacent, so the kernel is the same for any k.

One entry per ATen overload. `recognise(node)` says which row reduction the node computes over the
trailing axes of its first argument, or raises `NotSpellable` saying why it is not one. An entry names
- the statistics a row kernel accumulates (a C++ struct of `ROW_STATS`, merged across threads),
- whether the op's value is one per element (softmax, layer_norm) or one per row (logsumexp, mean),
- the C++ expression of that value from the finalised statistics (`spell`),
- the float64 torch formula the CPU check runs in its place (`reference`), written like the kernel
  computes it (max and sum of exponentials, mean and biased variance, ...), not as the ATen op.

Numerics are those of dev/kernels/rowwise.cu, verified on an H100: online softmax (running max and
sum of exponentials, merged as m = max, s = s1*e^(m1-m) + s2*e^(m2-m)), Welford per thread with Chan's
merge for LayerNorm, plain fp32 sums for sum/mean; precise expf/logf/sqrtf and division, no fast-math.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import fx

from ...cpp_literals import cpp_float
from ...cuda_sources import cuda_source, paste_include
from ...pointwise import NotSpellable, bind_arguments, op_key
from ...traced import size_hint, tensor_meta


@dataclass(frozen=True)
class RowReduction:
    """What one recognised node computes, over the last `axes` axes of `data` (one row: their values)."""

    op: str  # softmax, log_softmax, logsumexp, layer_norm, mean, sum, amax, amin, var, std, l2_norm, l1_norm
    stats: str  # the C++ statistics struct (ROW_STATS)
    per_element: bool  # the value has the input's shape; else one value per row
    data: str  # the reduced tensor (a graph value of the row shape)
    params: tuple[str | None, ...] = ()  # per-column parameters: layer_norm's weight and bias
    eps: float = 0.0
    keepdim: bool = True  # per-row values: the reduced axes are kept with size 1
    axes: int = 1  # how many trailing axes a row spans
    channels: bool = False  # a row is instead the channel axis of [N, C, *S]: one per (n, s), values S apart
    correction: float = 0.0  # var and std: the sum of squared deviations is divided by cols - correction

    @property
    def over(self) -> str:
        """The reduced axes in words."""
        if self.channels:
            return "over the channel axis"
        return "over the last axis" if self.axes == 1 else f"over the last {self.axes} axes"

    def reduced(self, rank: int) -> tuple[int, ...]:
        """The reduced axes of a rank-`rank` input."""
        return (1,) if self.channels else tuple(range(rank - self.axes, rank))


_STATS = {"softmax": "FFRowSoftmax", "log_softmax": "FFRowSoftmax", "logsumexp": "FFRowSoftmax",
          "layer_norm": "FFRowWelford", "mean": "FFRowSum", "sum": "FFRowSum", "amax": "FFRowMax",
          "amin": "FFRowMin", "var": "FFRowWelford", "std": "FFRowWelford", "l2_norm": "FFRowSumSquares",
          "l1_norm": "FFRowSumAbs"}

# Row ops that also run over the channel axis of [N, C, *S] (min/max/sum/mean over it are the
# channel-reduction kernels', with pools and channels-last inputs)
CHANNEL_OPS = ("softmax", "log_softmax", "logsumexp")

# ATen overload -> (row op, the argument that names the reduced axis)
_OPS = {
    "aten.softmax.int": ("softmax", "dim"),
    "aten._softmax.default": ("softmax", "dim"),
    "aten.log_softmax.int": ("log_softmax", "dim"),
    "aten._log_softmax.default": ("log_softmax", "dim"),
    "aten.logsumexp.default": ("logsumexp", "dim"),
    "aten.layer_norm.default": ("layer_norm", "normalized_shape"),
    "aten.mean.dim": ("mean", "dim"),
    "aten.sum.dim_IntList": ("sum", "dim"),
    "aten.amax.default": ("amax", "dim"),
    "aten.amin.default": ("amin", "dim"),
    "aten.var.dim": ("var", "dim"),
    "aten.var.correction": ("var", "dim"),
    "aten.std.dim": ("std", "dim"),
    "aten.std.correction": ("std", "dim"),
    "aten.linalg_vector_norm.default": ("vector_norm", "dim"),
}


def _correction(args: dict) -> float:
    """var and std: what the sum of squared deviations is divided by, cols minus this (`unbiased` or
    `correction`; PyTorch's default is 1)."""
    if "unbiased" in args:
        return 1.0 if args["unbiased"] else 0.0
    correction = args.get("correction")
    return 1.0 if correction is None else float(correction)


def _norm_op(node_name: str, ord_) -> str:
    if ord_ in (2, 2.0):
        return "l2_norm"
    if ord_ in (1, 1.0):
        return "l1_norm"
    raise NotSpellable(f"{node_name} is a vector norm of order {ord_!r} (a row kernel takes orders 1 and 2)")


def is_row_op(node: fx.Node) -> bool:
    return node.op == "call_function" and op_key(node) in _OPS


def _meta(node) -> torch.Tensor | None:
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


def _axes(dims, rank: int) -> list[int] | None:
    """`dims` as sorted axes 0..rank-1; None when one is not an int axis of a rank-`rank` tensor, or repeats."""
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    if not dims or not all(isinstance(d, int) and -rank <= d < rank for d in dims):
        return None
    axes = sorted({d % rank for d in dims})
    return axes if len(axes) == len(dims) else None


def trailing_axes(dims, rank: int) -> int | None:
    """How many trailing axes `dims` names (each once, any order: (2, 3) or (-1, -2) of a rank-4 tensor
    is 2); None when they are not the trailing axes of a rank-`rank` tensor."""
    axes = _axes(dims, rank)
    return len(axes) if axes and axes == list(range(rank - len(axes), rank)) else None


def recognise(node: fx.Node) -> RowReduction:
    """The row reduction `node` computes, or NotSpellable with the reason it is not one."""
    if not is_row_op(node):
        raise NotSpellable(f"{op_key(node)} is not a row reduction")
    op, axis_arg = _OPS[op_key(node)]
    args = bind_arguments(node, lambda n: n)
    data = args["input" if op == "layer_norm" else "self"]
    data_meta, out_meta = _meta(data), _meta(node)
    if data_meta is None or out_meta is None or data_meta.dtype != torch.float32 \
            or out_meta.dtype != torch.float32:
        raise NotSpellable(f"{node.name} does not compute float32 from float32")
    rank = data_meta.dim()
    if rank == 0:
        raise NotSpellable(f"{node.name} reduces a 0-d tensor")
    if op == "layer_norm":
        shape = list(args["normalized_shape"])
        if not 0 < len(shape) <= rank or shape != list(data_meta.shape[rank - len(shape):]):
            raise NotSpellable(f"{node.name} normalises over {shape}, not the trailing sizes of {list(data_meta.shape)}")
        params = tuple(p.name if isinstance(p, fx.Node) else None for p in (args["weight"], args["bias"]))
        return RowReduction(op, _STATS[op], True, data.name, params, float(args["eps"]), axes=len(shape))
    if op == "vector_norm":
        op = _norm_op(node.name, args["ord"])
    per_element = op in ("softmax", "log_softmax")
    keepdim = per_element or bool(args.get("keepdim"))
    axes = trailing_axes(args[axis_arg], rank)
    if axes is None and keepdim:
        axes = _with_unit_axes_after(args[axis_arg], data_meta.shape)
    channels = axes is None and op in CHANNEL_OPS and rank >= 3 and _axes(args[axis_arg], rank) == [1]
    if axes is None and not channels:
        raise NotSpellable(f"{node.name} reduces dims {args[axis_arg]}, not the last axis (or the last k axes "
                           f"together) of a rank-{rank} tensor")
    if args.get("dtype") is not None or args.get("half_to_float"):
        raise NotSpellable(f"{node.name} changes the dtype")
    correction = _correction(args) if op in ("var", "std") else 0.0
    return RowReduction(op, _STATS[op], per_element, data.name, keepdim=keepdim, axes=axes or 1, channels=channels,
                        correction=correction)


def _with_unit_axes_after(dims, shape) -> int | None:
    """Trailing axes that `dims` and the size-1 axes after them make up: softmax(x, 1) of [N, C, 1, 1] is a
    softmax over rows of its last 3 axes (the same values, and with the axes kept the same shape)."""
    axes = _axes(dims, len(shape))
    after = range(axes[-1] + 1, len(shape)) if axes else ()
    if axes is None or any(shape[d] != 1 for d in after):
        return None
    return trailing_axes([*axes, *after], len(shape))


# A row kernel runs a row per block (or per warp): with fewer rows than this, each of them long, most SMs
# idle. Measured on an H100 (dev/kernels/bench_row_shapes.py, relu(x).mean(-1) over 2^25 values): 8 rows
# 0.285 ms vs torch.compile's 0.140; 32 rows 0.096 vs 0.149; 128 or more rows 0.064-0.065.
MIN_ROWS = 32
LONG_ROW = 65536


def _rows_reason(red: RowReduction, data: fx.Node) -> str | None:
    """Why a reduction has too few, too long rows for a row kernel (None when it has enough)."""
    sizes = [size_hint(d) for d in tensor_meta(data).shape]
    reduced = red.reduced(len(sizes))
    cols = math.prod(sizes[a] for a in reduced)
    rows = math.prod(sizes) // max(1, cols)
    if rows < MIN_ROWS and cols >= LONG_ROW:
        return (f"{rows} rows of {cols} values (as traced): a row kernel reduces a row per block, so fewer "
                f"than {MIN_ROWS} long rows leave most of the GPU idle")
    return None


def recognise_kernel(node: fx.Node) -> RowReduction:
    """`recognise`, refusing reductions of a few long rows."""
    red = recognise(node)
    reason = _rows_reason(red, next(a for a in node.all_input_nodes if a.name == red.data))
    if reason:
        raise NotSpellable(f"{node.name}: {reason}")
    return red


def row_op_reason(node: fx.Node) -> str | None:
    """Why a node of the row-reduction table is not a row kernel (None when it is one)."""
    try:
        recognise_kernel(node)
    except NotSpellable as exc:
        return str(exc)
    return None


def spell(red: RowReduction, v: str, params: dict[str, str]) -> str:
    """The value as C++ from the finalised statistics `ff_st`, the row's element `v` (per-element ops)
    and the per-column parameters' values; `ff_cols` is the row length."""
    if red.op == "softmax":
        return f"(expf({v} - ff_st.m) / ff_st.s)"
    if red.op == "log_softmax":
        return f"(({v} - ff_st.m) - logf(ff_st.s))"
    if red.op == "logsumexp":
        return "ff_st.logsumexp()"
    if red.op == "layer_norm":
        weight, bias = (params.get(p) if p else None for p in red.params)
        expr = f"(({v} - ff_st.mean) - ff_st.lo) * ff_st.rstd"  # the mean as hi + lo: rounded once near it
        expr = f"({expr} * {weight})" if weight else f"({expr})"
        return f"({expr} + {bias})" if bias else expr
    if red.op == "mean":
        return "(ff_st.sum / (float)ff_cols)"
    if red.op in ("sum", "l1_norm"):
        return "ff_st.sum"
    if red.op == "l2_norm":
        return "sqrtf(ff_st.sum)"
    if red.op in ("var", "std"):  # m2 / max(cols - correction, 0), as PyTorch (0 rows' worth: inf or NaN)
        var = f"(ff_st.m2 / fmaxf((float)ff_cols - {cpp_float(red.correction)}, 0.0f))"
        return var if red.op == "var" else f"sqrtf{var}"
    return "ff_st.m"  # amax, amin


def eps_literal(red: RowReduction) -> str:
    return cpp_float(red.eps)


def reference(red: RowReduction, v: torch.Tensor, params: dict[str, torch.Tensor | None]) -> torch.Tensor:
    """The value in the precision of `v` (float64 on the CPU check), by the kernel's formulas: on the rows
    (the trailing axes flattened), then in `v`'s shape (per-element values) or its per-row shape."""
    if red.channels:  # the channel axis last, then as rows of the last axis
        value = reference(replace(red, channels=False, axes=1, keepdim=True), v.movedim(1, -1), params).movedim(-1, 1)
        return value if red.per_element or red.keepdim else value.squeeze(1)
    lead = v.shape[:v.dim() - red.axes]
    value = _on_rows(red, v.reshape(*lead, math.prod(v.shape[v.dim() - red.axes:])), {k: p if p is None else p.reshape(-1) for k, p in params.items()})
    if red.per_element:
        return value.reshape(v.shape)
    return value.reshape(*lead, *[1] * red.axes) if red.keepdim else value.reshape(lead)


def _on_rows(red: RowReduction, v: torch.Tensor, params: dict[str, torch.Tensor | None]) -> torch.Tensor:
    """`reference` on rows along the last axis; per-row values keep the axis."""
    if red.op in ("softmax", "log_softmax", "logsumexp"):
        m = v.amax(dim=-1, keepdim=True)
        shifted = torch.where(torch.isinf(m), torch.zeros_like(v), v - m) if red.op == "logsumexp" else v - m
        s = torch.exp(shifted).sum(dim=-1, keepdim=True)
        if red.op == "softmax":
            return torch.exp(v - m) / s
        if red.op == "log_softmax":
            return (v - m) - torch.log(s)
        out = torch.where(torch.isinf(m), m, m + torch.log(s))
    elif red.op == "layer_norm":
        mean = v.mean(dim=-1, keepdim=True)
        var = ((v - mean) ** 2).mean(dim=-1, keepdim=True)  # biased, as LayerNorm
        out = (v - mean) / torch.sqrt(var + red.eps)
        weight, bias = (params.get(p) if p else None for p in red.params)
        out = out * weight if weight is not None else out
        return out + bias if bias is not None else out
    elif red.op in ("mean", "sum"):
        out = v.sum(dim=-1, keepdim=True)
        out = out / v.shape[-1] if red.op == "mean" else out
    elif red.op in ("var", "std"):
        mean = v.mean(dim=-1, keepdim=True)
        m2 = ((v - mean) ** 2).sum(dim=-1, keepdim=True)
        out = m2 / max(v.shape[-1] - red.correction, 0.0)
        out = torch.sqrt(out) if red.op == "std" else out
    elif red.op in ("l2_norm", "l1_norm"):
        out = (v * v).sum(dim=-1, keepdim=True).sqrt() if red.op == "l2_norm" else v.abs().sum(dim=-1, keepdim=True)
    else:
        out = v.amax(dim=-1, keepdim=True) if red.op == "amax" else v.amin(dim=-1, keepdim=True)
    return out


ROW_STATS = paste_include(cuda_source(__package__, "stats.cuh"), "welford.cuh")
