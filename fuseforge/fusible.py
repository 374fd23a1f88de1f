"""Whether an op can live in a generated kernel, and if not, why: the reason the plan records for every
pair of neighbours it keeps apart (`WhyNotFused`), and the report gives for every op left a torch call."""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch
from torch import fx

from . import pointwise
from .plan import KERNEL_DTYPES, Family
from .pointwise import NotSpellable
from .traced import tensor_meta


def unwrap_getitem(node: fx.Node) -> fx.Node:
    """The op that produced a tuple element, for messages."""
    return node.args[0] if node.target is operator.getitem else node


def _may_be_computed_in_the_kernel(node: fx.Node) -> bool:
    """A pointwise op's value (a mask like `x > 0`) can stay in registers; a graph input, a buffer or any other
    op's value is read from memory, which a kernel's binding takes in float32 only."""
    return node.op == "call_function" and pointwise.is_pointwise(node)


def fusible_reason(node: fx.Node, families: Sequence[Family] = ()) -> str | None:
    """None if the node can live in a generated (pointwise) kernel, else why not; a node that one of
    `families` recognises but cannot take gets that family's note ("..., nor a row kernel: ...")."""
    if node.op != "call_function":
        return f"{node.name} is a graph {node.op}"
    if not pointwise.is_pointwise(node):
        for family in families:
            note = family.not_pointwise_note(node)
            if note:
                return f"{pointwise.op_key(node)} is not pointwise, nor {note}"
        return f"{pointwise.op_key(node)} is not pointwise (stays a torch call)"
    meta = tensor_meta(node)
    if meta is None or meta.dtype not in KERNEL_DTYPES:
        return f"{node.name} has dtype {getattr(meta, 'dtype', None)}; kernels compute float32"
    for arg in node.all_input_nodes:
        arg_meta = tensor_meta(arg)
        if arg_meta is None or arg_meta.dtype not in KERNEL_DTYPES:
            return f"input {arg.name} of {node.name} has dtype {getattr(arg_meta, 'dtype', None)}"
        if arg_meta.dtype != torch.float32 and not _may_be_computed_in_the_kernel(arg):
            return f"input {arg.name} of {node.name} is a {arg_meta.dtype} tensor in memory; kernels read float32"
    try:
        pointwise.spell(node, lambda n: n.name)
    except NotSpellable as exc:
        return f"{node.name}: {exc}"
    return None
