"""The traced values of a captured graph's nodes: tensor metadata, shapes and sizes as traced."""

from __future__ import annotations

import operator

import torch
from torch import fx
from torch._prims_common import suggest_memory_format


def tensor_meta(node) -> torch.Tensor | None:
    """The traced tensor of a node (None for a non-node or a non-tensor value)."""
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


def size_hint(size) -> int:
    """A size as traced (the example value of a symbolic size)."""
    if isinstance(size, int):
        return size
    hint = getattr(size.node, "hint", None)
    return int(hint if hint is not None else size.node.shape_env.size_hint(size.node.expr))


def traced_shape(node: fx.Node) -> tuple:
    """The traced shape of a node, symbolic sizes as names."""
    return tuple(s if isinstance(s, int) else str(s) for s in tensor_meta(node).shape)


# Batch norms whose first output eager's kernels (CPU and cuDNN) allocate in the input's suggested memory format:
# row-major unless the input is channels-last. The trace's meta kernels keep the input's strides instead (a
# transposed [N, C, L] input gives a transposed output there, a row-major one in eager).
_BATCH_NORMS = frozenset({"aten._native_batch_norm_legit_functional.default", "aten._native_batch_norm_legit.default",
                          "aten._native_batch_norm_legit_no_training.default", "aten.native_batch_norm.default"})
_CHANNELS_LAST_ORDER = {torch.channels_last: [0, 2, 3, 1], torch.channels_last_3d: [0, 2, 3, 4, 1]}


def eager_dim_order(node: fx.Node) -> list[int] | None:
    """The order of the value's dims from outermost to innermost in eager's memory (from the strides the
    trace recorded; for a batch norm's output, its input's suggested memory format, as eager's kernels allocate
    it), or None where it is row-major (or cannot be told)."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dim() < 2:
        return None
    if node.target is operator.getitem and node.args[1] == 0 and isinstance(node.args[0], fx.Node) and \
            str(node.args[0].target) in _BATCH_NORMS:
        x = node.args[0].args[0].meta.get("val") if isinstance(node.args[0].args[0], fx.Node) else None
        if not isinstance(x, torch.Tensor):
            return None
        return _CHANNELS_LAST_ORDER.get(suggest_memory_format(x))
    try:
        strides = [int(st) for st in val.stride()]
        sizes = [int(sz) for sz in val.shape]
    except Exception:  # a stride that is not a number here
        return None
    order = sorted(range(val.dim()), key=lambda d: (-strides[d], d))
    dense = all(strides[order[i]] == strides[order[i + 1]] * sizes[order[i + 1]] for i in range(len(order) - 1))
    return order if dense and order != list(range(val.dim())) else None


# Functional draws that a captured graph holds for the in-place draw they come from: `bernoulli.p(t, p)` is the
# functional form of `t.bernoulli_(p)` (dropout's decomposition: `empty_like(x).bernoulli_(1 - p)`), which fills t's
# memory in order, where the functional op allocates a row-major result and fills that: another element gets each
# draw wherever t is not row-major. Drawn in place into an empty tensor in t's eager layout (t's values are not
# read), they draw eager's values.
IN_PLACE_DRAWS = {"aten.bernoulli.p": "bernoulli_"}


def is_random(node: fx.Node) -> bool:
    """Whether the node's op draws from the random generator (which draws in its input's memory order)."""
    return isinstance(node.target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in node.target.tags


def empty_in_eager_layout(value: torch.Tensor, node: fx.Node) -> torch.Tensor:
    """An uninitialised tensor of `value`'s shape in eager's memory order of the traced `node`: what an in-place
    draw (`IN_PLACE_DRAWS`) fills as eager filled it."""
    order = eager_dim_order(node)
    if order is None:
        return torch.empty_like(value, memory_format=torch.contiguous_format)
    inverse = [order.index(d) for d in range(len(order))]
    return torch.empty_like(value.permute(order), memory_format=torch.contiguous_format).permute(inverse)


def in_eager_layout(value: torch.Tensor, node: fx.Node) -> torch.Tensor:
    """`value` (the traced `node`'s, in any layout) with eager's memory order: what a random op, which draws in
    the memory order of its input, must be given to draw eager's values."""
    order = eager_dim_order(node)
    if order is None or not isinstance(value, torch.Tensor):
        return value
    inverse = [order.index(d) for d in range(len(order))]
    return value.permute(order).contiguous().permute(inverse)
