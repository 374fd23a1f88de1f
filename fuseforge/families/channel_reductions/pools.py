"""The pooling table: max and average pools over the spatial axes of [N, C, *spatial] that a channel kernel computes.

A pool is the prologue of a channel kernel (family `channel_reductions`): each output value of the pool is
computed from its window of the pool's input in registers, so the pooled tensor is never written.
`recognise(node)` says which pool a node computes (max_pool1d/2d/3d, with or without indices; avg_pool1d/2d/3d),
with its window as captured (kernel, stride, padding, dilation, ceil_mode; count_include_pad and
divisor_override for average pools), or raises `NotSpellable` saying why it is not one. For a pool that
returns (values, indices), the indices must be unused. An entry names
- the window (`Pool`), the output size per spatial axis (`out_size`, PyTorch's formula with ceil_mode);
- the C++ of one output value (`spell_window`, `spell_pool`): the window start per axis and, for an
  average pool, the divisor, computed once per output position; then the loop over the window;
- the float64 torch formula the CPU check runs in its place (`reference`), written like the kernel
  computes it: padding as -inf (max) or 0 (average), the divisor by PyTorch's rule.

Numerics as PyTorch: max pools propagate NaN (`v > m || v != v`); average pools add the window in fp32 in
window order and divide by the divisor (precise division).
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass

import torch
from torch import fx

from ...cpp_literals import cpp_float
from ...pointwise import NotSpellable, bind_arguments, op_key

# ATen overload -> (pool kind, spatial axes, whether it returns (values, indices))
_OPS = {
    "aten.max_pool1d.default": ("max", 1, False),
    "aten.max_pool1d_with_indices.default": ("max", 1, True),
    "aten.avg_pool1d.default": ("avg", 1, False),
    "aten.max_pool2d.default": ("max", 2, False),
    "aten.max_pool3d.default": ("max", 3, False),
    "aten.max_pool2d_with_indices.default": ("max", 2, True),
    "aten.max_pool3d_with_indices.default": ("max", 3, True),
    "aten.avg_pool2d.default": ("avg", 2, False),
    "aten.avg_pool3d.default": ("avg", 3, False),
}


@dataclass(frozen=True)
class Pool:
    """What one recognised node computes over the spatial axes of `data`."""

    op: str  # max, avg
    data: str  # the pooled tensor: [N, C, *spatial]
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    ceil_mode: bool
    count_include_pad: bool = True  # average pools
    divisor_override: int | None = None
    values: str | None = None  # with indices: the tuple access of the values

    @property
    def dims(self) -> int:
        return len(self.kernel)

    @property
    def describe(self) -> str:
        return (f"{self.op}_pool{self.dims}d (kernel {list(self.kernel)}, stride {list(self.stride)}, padding "
                f"{list(self.padding)}, dilation {list(self.dilation)}, ceil_mode {self.ceil_mode})")


def is_pool_op(node: fx.Node) -> bool:
    return node.op == "call_function" and op_key(node) in _OPS


def _meta(node) -> torch.Tensor | None:
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


def _per_axis(value, dims: int, name: str, node: fx.Node) -> tuple[int, ...]:
    value = [value] if isinstance(value, int) else list(value)
    if len(value) == 1:
        value = value * dims
    if len(value) != dims or not all(isinstance(v, int) for v in value):
        raise NotSpellable(f"{node.name}: {name} {value} is not {dims} integers")
    return tuple(value)


def _values_access(node: fx.Node) -> str:
    users = list(node.users)
    for user in users:
        if user.target is not operator.getitem or user.args[1] != 0:
            raise NotSpellable(f"the indices of {node.name} are used ({user.name}): a channel kernel computes the "
                               "pooled values only")
    if len(users) != 1:
        raise NotSpellable(f"{node.name} needs exactly one tuple access of its values")
    return users[0].name


def recognise(node: fx.Node) -> Pool:
    """The pool `node` computes, or NotSpellable with the reason it is not one."""
    if not is_pool_op(node):
        raise NotSpellable(f"{op_key(node)} is not a pool")
    op, dims, with_indices = _OPS[op_key(node)]
    args = bind_arguments(node, lambda n: n)
    data = args["self"]
    meta = _meta(data)
    if meta is None or meta.dtype != torch.float32:
        raise NotSpellable(f"{node.name} does not pool float32")
    if meta.dim() != dims + 2:
        raise NotSpellable(f"{node.name} pools a rank-{meta.dim()} tensor; channel kernels need [N, C, *spatial]")
    if not all(isinstance(s, int) for s in meta.shape[2:]):
        raise NotSpellable(f"{node.name} pools symbolic spatial sizes")
    kernel = _per_axis(args["kernel_size"], dims, "kernel_size", node)
    stride = _per_axis(args["stride"] or kernel, dims, "stride", node)
    padding = _per_axis(args["padding"], dims, "padding", node)
    dilation = _per_axis(args.get("dilation", 1), dims, "dilation", node)
    if any(k < 1 for k in kernel) or any(s < 1 for s in stride) or any(d < 1 for d in dilation) \
            or any(2 * p > k for p, k in zip(padding, kernel)):
        raise NotSpellable(f"{node.name} has a window PyTorch refuses")
    values = _values_access(node) if with_indices else None
    if op == "max":
        return Pool(op, data.name, kernel, stride, padding, dilation, bool(args["ceil_mode"]), values=values)
    override = args.get("divisor_override")
    if override is not None and (not isinstance(override, int) or override == 0):
        raise NotSpellable(f"{node.name} has divisor_override {override}")
    return Pool(op, data.name, kernel, stride, padding, dilation, bool(args["ceil_mode"]),
                bool(args["count_include_pad"]), override)


def out_size(pool: Pool, axis: int, size: int) -> int:
    """PyTorch's pooling output size along `axis` for an input of `size` (ceil_mode: the last window must
    start inside the input or its left padding)."""
    k, s, p, d = pool.kernel[axis], pool.stride[axis], pool.padding[axis], pool.dilation[axis]
    span = size + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if pool.ceil_mode else 0)) // s + 1
    if pool.ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _divisor(pool: Pool, axis: int, size: int, out: int) -> torch.Tensor:
    """Per output index along `axis`: the window's size within the padded input, and its count of input values."""
    k, s, p = pool.kernel[axis], pool.stride[axis], pool.padding[axis]
    start = torch.arange(out, dtype=torch.float64) * s - p
    end = torch.clamp(start + k, max=size + p)
    inside = torch.clamp(end, max=size) - torch.clamp(start, min=0)
    return end - start if pool.count_include_pad else inside


def reference(pool: Pool, v: torch.Tensor) -> torch.Tensor:
    """The pooled value in the precision of `v` (float64 on the CPU check), by the kernel's formulas."""
    sizes = list(v.shape[2:])
    outs = [out_size(pool, a, n) for a, n in enumerate(sizes)]
    fill = float("-inf") if pool.op == "max" else 0.0
    pads = []
    for a in reversed(range(pool.dims)):  # F.pad lists the last axis first: (left, right) per axis
        need = (outs[a] - 1) * pool.stride[a] + pool.dilation[a] * (pool.kernel[a] - 1) + 1
        pads += [pool.padding[a], max(0, need - sizes[a] - pool.padding[a])]
    padded = torch.nn.functional.pad(v, pads, value=fill)
    acc = None
    for offsets in itertools.product(*[range(k) for k in pool.kernel]):
        window = padded[(slice(None), slice(None), *[
            slice(o * pool.dilation[a], o * pool.dilation[a] + (outs[a] - 1) * pool.stride[a] + 1, pool.stride[a])
            for a, o in enumerate(offsets)])]
        acc = window if acc is None else torch.maximum(acc, window) if pool.op == "max" else acc + window
    if pool.op == "max":
        return acc
    if pool.divisor_override:
        return acc / pool.divisor_override
    divisor = torch.ones((), dtype=torch.float64)
    for a in range(pool.dims):
        shape = [1] * pool.dims
        shape[a] = outs[a]
        divisor = divisor * _divisor(pool, a, sizes[a], outs[a]).view(shape)
    return acc / divisor.to(v.dtype)


def spell_window(pool: Pool) -> list[str]:
    """C++ lines: the window start per axis (`ff_w.start[a]`) and the average pool's divisor
    (`ff_w.divisor`) of output position `ff_s`, from the sizes in `d` (FFCredDims)."""
    lines = ["FFPoolWindow ff_w;", "int ff_rest = (int)ff_s;  // the binding checks sizes < 2^31"]
    for a in reversed(range(1, pool.dims)):
        lines.append(f"const int ff_o{a} = ff_rest % (int)d.out_size[{a}];")
        lines.append(f"ff_rest /= (int)d.out_size[{a}];")
    lines.append("const int ff_o0 = ff_rest;")
    for a in range(pool.dims):
        pad = f" - {pool.padding[a]}" if pool.padding[a] else ""
        lines.append(f"ff_w.start[{a}] = ff_o{a} * {pool.stride[a]}{pad};")
    if pool.op == "max":
        lines.append("ff_w.divisor = 1.0f;")
        return lines
    if pool.divisor_override:
        lines.append(f"ff_w.divisor = {cpp_float(float(pool.divisor_override))};")
        return lines
    terms = []
    for a in range(pool.dims):
        k, p = pool.kernel[a], pool.padding[a]
        lines.append(f"const int ff_end{a} = min(ff_w.start[{a}] + {k}, (int)d.in_size[{a}] + {p});")
        if pool.count_include_pad:
            terms.append(f"(ff_end{a} - ff_w.start[{a}])")
        else:
            terms.append(f"(min(ff_end{a}, (int)d.in_size[{a}]) - max(ff_w.start[{a}], 0))")
    lines.append(f"ff_w.divisor = (float)({' * '.join(terms)});  // PyTorch's divisor rule")
    return lines


def spell_pool(pool: Pool, prologue: list[str] = ()) -> list[str]:
    """C++ lines: the pooled value `ff_v` of the window `ff_w` over the plane `ff_plane` (sizes in `d`). Without
    padding and ceil_mode every window lies inside the input (PyTorch's output size), so no bounds checks.
    `prologue`: lines computing the value pooled, `ff_x`, from the element read, `ff_raw` (the pointwise ops
    before the pool); padding is skipped before them, as PyTorch pads the prologue's result."""
    inside = not any(pool.padding) and not pool.ceil_mode
    lines = [f"const int ff_n{a} = (int)d.in_size[{a}];" for a in range(int(inside), pool.dims)]
    lines.append("float ff_v = -INFINITY;" if pool.op == "max" else "float ff_v = 0.0f;")
    indent = ""
    for a in range(pool.dims):
        k, dil = pool.kernel[a], pool.dilation[a]
        lines.append(f"{indent}#pragma unroll")
        lines.append(f"{indent}for (int ff_k{a} = 0; ff_k{a} < {k}; ++ff_k{a}) {{")
        indent += "    "
        step = f"ff_k{a} * {dil}" if dil != 1 else f"ff_k{a}"
        lines.append(f"{indent}const int ff_i{a} = ff_w.start[{a}] + {step};")
        if not inside:
            lines.append(f"{indent}if (ff_i{a} < 0 || ff_i{a} >= ff_n{a}) continue;")
    at = "ff_i0"
    for a in range(1, pool.dims):
        at = f"({at} * ff_n{a} + ff_i{a})"
    load = f"ff_cred_ldg(ff_plane + (kNHWC ? (int64_t)({at}) * d.channels : {at}))"
    if prologue:
        lines.append(f"{indent}const float ff_raw = {load};")
        lines += [indent + line for line in prologue]
    else:
        lines.append(f"{indent}const float ff_x = {load};")
    lines.append(f"{indent}" + ("if (ff_x > ff_v || ff_x != ff_x) ff_v = ff_x;  // NaN propagates, as PyTorch"
                                if pool.op == "max" else "ff_v += ff_x;"))
    for _ in range(pool.dims):
        indent = indent[:-4]
        lines.append(f"{indent}}}")
    if pool.op == "avg":
        lines.append("ff_v = ff_v / ff_w.divisor;")
    return lines
