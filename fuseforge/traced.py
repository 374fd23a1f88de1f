"""The traced values of a captured graph's nodes: tensor metadata, shapes and sizes as traced."""

from __future__ import annotations

import torch
from torch import fx


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
