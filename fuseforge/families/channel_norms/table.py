"""The channel-norm table: train-mode batch norm, group norm and instance norm (with its input's statistics: a group
norm of one channel a group), the normalisations a channel kernel computes.

A channel norm takes statistics of its input [N, C, *spatial] (or [N, C]) per *unit* and normalises each
element with its unit's statistics, then applies a per-channel affine map: batch norm's unit is a channel
(every axis but axis 1 is reduced), group norm's is one sample's group of C / G consecutive channels. `recognise(node)` says which channel norm a
node computes, or raises `NotSpellable` saying why it is not one. A recognised norm names
- the normalised tensor (`data`) and its per-channel parameters (weight, bias, running mean and variance),
- the constants (momentum, eps) that are built into the kernel,
- what each element of the op's result tuple is (`RESULTS`), so the getitem users of the node know
  whether they read the normalised value (one per element) or a statistic (one per channel).

`reference` is the float64 formula the CPU check runs in the kernel's place, written like the kernel
computes it (mean, biased variance for normalising, unbiased variance for the running variance, as
PyTorch's batch_norm does), not as the ATen op.

Numerics (`runtime.py`): Welford per thread (per four values on the vectorised path) with
Chan's merge, partials per (channel, part) combined in a fixed order: deterministic, no float atomics;
precise division and sqrtf, no fast-math.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import fx

from ...cpp_literals import cpp_float
from ...pointwise import NotSpellable, bind_arguments, op_key

# ATen overload -> whether it reads and returns running statistics
_OPS = {
    "aten._native_batch_norm_legit_functional.default": True,
    "aten._native_batch_norm_legit.no_stats": False,
    "aten.group_norm.default": False,
    "aten.instance_norm.default": False,  # with its input's statistics only: a group norm of one channel a group
}

# result tuple index -> (what it is, one value per element or per channel)
RESULTS = {0: ("normalised", "element"), 1: ("batch mean", "channel"), 2: ("inverse std", "channel"),
           3: ("new running mean", "channel"), 4: ("new running var", "channel")}


@dataclass(frozen=True)
class ChannelNorm:
    """What one recognised node computes over every axis of `data` but axis 1."""

    op: str  # batch_norm, group_norm, instance_norm (a group norm of one channel a group)
    data: str  # the normalised tensor: [N, C, *spatial]
    weight: str | None
    bias: str | None
    running_mean: str | None  # None: the node neither reads nor returns running statistics
    running_var: str | None
    momentum: float
    eps: float
    groups: int = 0  # group norm: G groups of channels per sample; 0: batch norm (one unit per channel)

    @property
    def describe(self) -> str:
        if self.op == "instance_norm":
            return "instance_norm (statistics per sample and channel)"
        return f"group_norm ({self.groups} groups)" if self.groups else f"train-mode {self.op}"

    @property
    def params(self) -> tuple[str, ...]:
        """The per-channel inputs the norm itself reads, in a fixed order."""
        return tuple(p for p in (self.weight, self.bias, self.running_mean, self.running_var) if p)


def is_channel_op(node: fx.Node) -> bool:
    return node.op == "call_function" and op_key(node) in _OPS


def _meta(node) -> torch.Tensor | None:
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


def recognise(node: fx.Node) -> ChannelNorm:
    """The channel norm `node` computes, or NotSpellable with the reason it is not one."""
    if not is_channel_op(node):
        raise NotSpellable(f"{op_key(node)} is not a channel norm")
    args = bind_arguments(node, lambda n: n)
    data = args["input"]
    meta = _meta(data)
    if meta is None or meta.dtype != torch.float32:
        raise NotSpellable(f"{node.name} does not normalise float32")
    if meta.dim() < 2:
        raise NotSpellable(f"{node.name} normalises a tensor of rank {meta.dim()}; channel kernels need [N, C, ...]")
    if op_key(node) == "aten.group_norm.default":
        return _group_norm(node, args, meta)
    if op_key(node) == "aten.instance_norm.default":
        return _instance_norm(node, args, meta)
    if not args["training"]:
        raise NotSpellable(f"{node.name} is in eval mode (running statistics): a per-channel affine map, "
                           "not a reduction")
    momentum, eps = args["momentum"], args["eps"]
    if not isinstance(momentum, (int, float)) or not isinstance(eps, (int, float)):
        raise NotSpellable(f"{node.name} has a momentum or eps that is not a constant")
    params = [args.get(k) for k in ("weight", "bias", "running_mean", "running_var")]
    for p in params:
        pm = _meta(p)
        if p is not None and (pm is None or pm.dtype != torch.float32 or pm.dim() != 1):
            raise NotSpellable(f"{node.name}: parameter {getattr(p, 'name', p)} is not a float32 vector")
    names = [p.name if isinstance(p, fx.Node) else None for p in params]
    if _OPS[op_key(node)] and (names[2] is None or names[3] is None):
        raise NotSpellable(f"{node.name} updates running statistics it was not given")
    return ChannelNorm("batch_norm", data.name, names[0], names[1], names[2], names[3], float(momentum), float(eps))


def _group_norm(node: fx.Node, args: dict, meta: torch.Tensor) -> ChannelNorm:
    groups, channels = args["num_groups"], meta.shape[1]
    if not isinstance(groups, int) or not isinstance(channels, int) or groups <= 0 or channels % groups:
        raise NotSpellable(f"{node.name}: {channels} channels in {groups} groups")
    return _per_unit_norm("group_norm", node, args, groups)


def _instance_norm(node: fx.Node, args: dict, meta: torch.Tensor) -> ChannelNorm:
    """instance_norm(x, w, b, eps) normalising with x's own statistics = group_norm(x, C, w, b, eps): the
    statistics of one sample's channel, the biased variance, then the per-channel affine map."""
    channels = meta.shape[1]
    if args.get("use_input_stats") is not True:
        raise NotSpellable(f"{node.name} normalises with running statistics (an eval-mode instance norm)")
    if args.get("running_mean") is not None or args.get("running_var") is not None:
        raise NotSpellable(f"{node.name} updates running statistics (track_running_stats): not a group norm")
    if not isinstance(channels, int) or meta.dim() < 3:
        raise NotSpellable(f"{node.name}: an instance norm of {meta.dim()} axes with {channels} channels")
    return _per_unit_norm("instance_norm", node, args, channels)


def _per_unit_norm(op: str, node: fx.Node, args: dict, groups: int) -> ChannelNorm:
    if not isinstance(args["eps"], (int, float)):
        raise NotSpellable(f"{node.name} has an eps that is not a constant")
    params = [args.get(k) for k in ("weight", "bias")]
    for p in params:
        pm = _meta(p)
        if p is not None and (pm is None or pm.dtype != torch.float32 or pm.dim() != 1):
            raise NotSpellable(f"{node.name}: parameter {getattr(p, 'name', p)} is not a float32 vector")
    names = [p.name if isinstance(p, fx.Node) else None for p in params]
    return ChannelNorm(op, args["input"].name, names[0], names[1], None, None, 0.0, float(args["eps"]), groups)


def result_kind(index: int) -> str:
    """`element` or `channel`: how many values result `index` of the op's tuple holds."""
    return RESULTS[index][1]


def spell_normalised(norm: ChannelNorm, v: str, params: dict[str, str]) -> str:
    """The normalised value as C++ from the element `v`, the channel's finalised statistics `ff_n`
    (the mean as hi + lo, invstd: (v - hi) - lo is v - mean rounded once near the mean) and the per-channel
    parameters' values."""
    expr = f"((({v} - ff_n.mean) - ff_n.lo) * ff_n.invstd)"
    expr = f"({expr} * {params[norm.weight]})" if norm.weight else expr
    return f"({expr} + {params[norm.bias]})" if norm.bias else expr


def literals(norm: ChannelNorm) -> tuple[str, str]:
    return cpp_float(norm.eps), cpp_float(norm.momentum)


def reference(norm: ChannelNorm, v: torch.Tensor, params: dict[str, torch.Tensor]) -> tuple:
    """The op's result tuple in the precision of `v` (float64 on the CPU check), by the kernel's formulas;
    group norm: its one result."""
    if norm.groups:
        return _group_norm_reference(norm, v, params)
    dims = [0, *range(2, v.dim())]
    count = v.numel() // v.shape[1]
    mean = v.mean(dim=dims)
    m2 = ((v - mean.view(1, -1, *[1] * (v.dim() - 2))) ** 2).sum(dim=dims)
    invstd = 1.0 / torch.sqrt(m2 / count + norm.eps)
    shape = (1, -1, *[1] * (v.dim() - 2))
    out = (v - mean.view(shape)) * invstd.view(shape)
    if norm.weight:
        out = out * params[norm.weight].view(shape)
    if norm.bias:
        out = out + params[norm.bias].view(shape)
    if norm.running_mean is None:
        return out, mean, invstd
    unbiased = m2 / (count - 1) if count > 1 else m2 / 0.0  # PyTorch divides by n - 1 too (nan at n = 1)
    new_mean = norm.momentum * mean + (1.0 - norm.momentum) * params[norm.running_mean]
    new_var = norm.momentum * unbiased + (1.0 - norm.momentum) * params[norm.running_var]
    return out, mean, invstd, new_mean, new_var


def _group_norm_reference(norm: ChannelNorm, v: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
    units = v.reshape(v.shape[0], norm.groups, -1)
    mean = units.mean(dim=-1, keepdim=True)
    var = ((units - mean) ** 2).mean(dim=-1, keepdim=True)  # biased, as GroupNorm
    out = ((units - mean) / torch.sqrt(var + norm.eps)).reshape(v.shape)
    shape = (1, -1, *[1] * (v.dim() - 2))
    if norm.weight:
        out = out * params[norm.weight].view(shape)
    return out + params[norm.bias].view(shape) if norm.bias else out
