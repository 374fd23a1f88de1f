"""Channel-reduction and pool groups: a reduction over the channel axis or a pool, with the pointwise ops around it.

Runs after the channel-norm groups. Each node of the channel-reduction
table (`table.recognise`: amin, amax, sum, mean, min.dim / max.dim values over axis 1 of
[N, C, *spatial]) becomes a group with the tuple access of its values, and then takes in neighbouring
pointwise groups (the prologue that computes the reduced value, the epilogue that reads the result, and
groups feeding those) while the whole stays one channel-reduction kernel:

- convex (no path leaves the group and comes back);
- every member before the reduction (the prologue) has the reduced tensor's shape F = [N, C, *spatial]
  and is read only inside the kernel; every member after it (the epilogue) has the result's shape
  R = [N, 1, *spatial] or [N, *spatial] (one value per (sample, position));
- every external input is *full* (shape F), *per-channel* (C at axis 1 of F, ones elsewhere) or a
  *scalar* for the prologue; *reduced* (shape R) or a scalar for the epilogue; float32, one class each;
- at least one input is full (it gives the kernel N, C and the spatial size); outputs are float32 of shape R.

A max or average pool (`pools.recognise`) may join as the first op of the prologue: the group then
reads the pool's input (class *pooled*) and F is the pooled shape; each pooled value is computed from its
window in registers. Pointwise ops before the pool may join as its *window prologue*: members of the pool's
input shape P, read only by each other and the pool, computed per window element from one tensor of shape
P (then that tensor is the pooled input), per-channel operands and scalars; by the identity
pool(f(x)) = pool of f applied to each window element, so the pool's input is never written. Where windows
overlap more than `MAX_WINDOW_REUSE`-fold (a 3x3 window at stride 1 reads each value 9 times) the prologue
would be recomputed that often, and it stays apart. A pool that no reduction takes in becomes a *pool
kernel* with the pointwise ops before and after it (one value per pooled element; at least one pointwise op
must join, else the pool stays PyTorch's kernel -- unless the pool reads a convolution's output: alone it is still
a pool kernel, which reads that output channels-last, so the convolution may run channels-last).

One reduction (and at most one pool) per group; one launch: each thread reduces the C values of its
(sample, position), strided by the spatial size, so consecutive threads read consecutive positions.
Whenever a neighbour stays apart, the reason is recorded (WhyNotFused).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import fx

from ...layout import CONVS
from ...partition_family import GroupGrower, edge_notes, notes_outside, recognise_reason
from ...plan import Claim, WhyNotFused
from ...pointwise import NotSpellable, op_key
from ...traced import tensor_meta, traced_shape
from ..base import operand_class
from . import pools as pool_table
from . import table
from .pools import Pool
from .table import ChannelReduction

OPERAND_CLASSES = ("full", "channel", "scalar", "reduced", "pooled")
MAX_WINDOW_REUSE = 4  # a window prologue joins where each input value is in at most this many windows (mean)


@dataclass(frozen=True)
class ChannelReduceSpec:
    """How a channel-reduction kernel sees its group: the reduction, its operands' classes, its epilogue."""

    anchor: str  # the reduction node (a pool kernel: the pool node)
    reduction: ChannelReduction | None  # None: a pool kernel (the pool and the pointwise ops after it)
    operands: tuple[tuple[str, str], ...]  # (input, class): full, channel, scalar, reduced or pooled
    reduced_nodes: tuple[str, ...]  # members with one value per (sample, position): the result and the epilogue
    full_shape: tuple  # F: the reduced tensor's shape, the pooled shape where a pool joined (symbolic sizes as names)
    out_shape: tuple  # R: the result's shape (a pool kernel: F)
    pool: Pool | None = None
    pool_node: str | None = None
    window_nodes: tuple[str, ...] = ()  # the window prologue: members computed per element of the pool's window

    def operand_class(self, name: str) -> str:
        return dict(self.operands)[name]

    @property
    def describe(self) -> str:
        """What the kernel computes, in words: `sum over the channels`, `max_pool3d (...), then sum over the channels`."""
        pooled = f"{self.pool.op}_pool{self.pool.dims}d" if self.pool else ""
        if self.reduction is None:
            return f"{pooled} with the pointwise ops {'around' if self.window_nodes else 'after'} it"
        if self.window_nodes:
            pooled += " of pointwise ops"
        return f"{pooled + ', then ' if pooled else ''}{self.reduction.describe}"

    def describe_lines(self, outputs: tuple[str, ...]) -> list[str]:
        """The plan artefact's lines for this kernel."""
        red, pool = self.reduction, self.pool
        pooled = f"{pool.describe} of {pool.data} -> {list(self.full_shape)}" if pool else ""
        if self.window_nodes:
            pooled += f" ({', '.join(self.window_nodes)} computed per window element)"
        reads = f"    reads {', '.join(f'{i} ({c})' for i, c in self.operands)}; writes {', '.join(outputs)}"
        if red is None:
            return [f"    pool kernel: {pooled}, then the pointwise ops per pooled element", reads]
        epilogue = [n for n in self.reduced_nodes if n not in (self.anchor, red.values)]
        after = f"; then {', '.join(epilogue)} per (sample, position)" if epilogue else ""
        return [f"    channel-reduction kernel: {pooled + ', then ' if pool else ''}{red.op} of {red.data} over axis 1 "
                f"of {list(self.full_shape)} -> {list(self.out_shape)}{after}", reads]

    def with_operand_order(self, inputs: tuple[str, ...]) -> ChannelReduceSpec:
        return dataclasses.replace(self, operands=tuple((i, self.operand_class(i)) for i in inputs))


def _out_shape(red: ChannelReduction | None, full: tuple) -> tuple:
    if red is None:
        return full
    return (full[0], 1, *full[2:]) if red.keepdim else (full[0], *full[2:])


def _pool_of(members: set[str], by_name, pools: dict[str, Pool]) -> tuple[str, Pool] | None | str:
    """The group's pool (node, Pool), None, or why the pools in `members` cannot be read by one kernel."""
    found = [name for name in members if name in pools]
    if len(found) > 1:
        return f"a channel kernel holds one pool, not {', '.join(sorted(found))}"
    if not found:
        return None
    pool = pools[found[0]]
    if pool.data in members:
        reuse = 1.0
        for k, s in zip(pool.kernel, pool.stride):
            reuse *= k / s
        if reuse > MAX_WINDOW_REUSE:
            return (f"{found[0]} reads {pool.data} through windows that overlap {reuse:g}-fold: the ops before "
                    "the pool would run that many times per value, so the pool's input stays outside the kernel")
    return found[0], pool


def _kinds(order: list[str], anchor: str, red, pool, full, out, by_name, below) -> dict | str:
    """Each member's kind: `anchor`, `tuple` (a (values, indices) result), `window` (the pool's input shape,
    before the pool: computed per window element), `element` (shape F: the pool and the prologue) or `reduced`
    (the result and the epilogue, shape R)."""
    kinds = {}
    window_shape = traced_shape(by_name[pool[1].data]) if pool else None
    for name in order:
        if red and name == anchor:
            kinds[name] = "anchor"
            continue
        if pool and name == pool[0] and pool[1].values:
            kinds[name] = "tuple"
            continue
        meta = tensor_meta(by_name[name])
        if meta is None or meta.dtype not in (torch.float32, torch.bool):
            return f"{name} has dtype {getattr(meta, 'dtype', None)}; channel kernels compute float32"
        after = red is not None and name in below[anchor]
        if pool and pool[0] in below[name]:
            if traced_shape(by_name[name]) != window_shape:
                return (f"{name} comes before the pool {pool[0]} with shape {list(traced_shape(by_name[name]))}, "
                        f"not the pool's input shape {list(window_shape)}")
            kinds[name] = "window"
            continue
        if pool and red and (name == pool[0] or name == pool[1].values) and after:
            return f"the pool {pool[0]} comes after the reduction"
        want = out if after else full
        if traced_shape(by_name[name]) != want:
            where = "after the reduction: one value per (sample, position)" if after else \
                "before the reduction: the reduced tensor's shape" if red else "the pooled shape"
            return f"{name} has shape {list(traced_shape(by_name[name]))}, not {list(want)} ({where})"
        kinds[name] = "reduced" if after else "element"
    return kinds


def _input_class(name: str, arg: fx.Node, kind: str, pool, full, out, window) -> str | None:
    shape = traced_shape(arg)
    if pool and name == pool[0]:
        return "pooled"
    if kind == "window":  # the pool's input shape: read through the windows, like the pool's own input
        cls = operand_class(shape, window)
        return "pooled" if cls == "full" else cls
    if kind == "reduced":
        return "reduced" if shape == out else "scalar" if all(d == 1 for d in shape) else None
    return operand_class(shape, full)


def _check_operands(order, kinds, pool, full, out, by_name) -> dict[str, str] | str:
    """The class of every external input; or why one cannot be read by the kernel."""
    classes: dict[str, str] = {}
    window = traced_shape(by_name[pool[1].data]) if pool else None
    for name in order:
        kind = kinds[name]
        for arg in by_name[name].all_input_nodes:
            if arg.name in kinds:
                if kind == "reduced" and kinds[arg.name] in ("element", "window"):
                    return f"{name} reads the prologue value {arg.name} after the reduction"
                if kinds[arg.name] == "window" and kind != "window" and name != pool[0]:
                    return f"{name} reads {arg.name}, a value of the pool's window prologue, outside the pool"
                continue
            meta = tensor_meta(arg)
            if meta is None or meta.dtype != torch.float32:
                return f"input {arg.name} of {name} has dtype {getattr(meta, 'dtype', None)}; channel kernels read float32"
            cls = _input_class(name, arg, kind, pool, full, out, window)
            if cls is None:
                target = f"the result's shape {list(out)}" if kind == "reduced" else \
                    f"the pool's input shape {list(window)}" if kind == "window" else f"the shape {list(full)}"
                return (f"input {arg.name} of shape {list(traced_shape(arg))} does not broadcast as the kernel reads it "
                        f"against {target}")
            if classes.get(arg.name, cls) != cls:
                return f"{arg.name} would be read both as {classes[arg.name]} and as {cls}"
            classes[arg.name] = cls
    pooled = [n for n, c in classes.items() if c == "pooled"]
    if len(pooled) > 1:
        return (f"the pool's window would read {len(pooled)} tensors ({', '.join(pooled)}); a kernel reads one "
                "through its windows")
    if not {"full", "pooled"} & set(classes.values()):
        return "no input of the kernel has the reduced tensor's shape (it gives the kernel N, C and the spatial size)"
    return classes


def reduce_spec(members: set[str], anchor: fx.Node, red: ChannelReduction | None, by_name, reach,
                pools: dict[str, Pool]) -> ChannelReduceSpec | str:
    """The group's ChannelReduceSpec, or why `members` cannot be one channel-reduction (or pool) kernel;
    `red` None: a pool kernel anchored at the pool `anchor`."""
    if not reach.convex(members):
        return "fusing would create a cycle through an op outside the kernel"
    pool = _pool_of(members, by_name, pools)
    if isinstance(pool, str):
        return pool
    pool_value = (pool[1].values or pool[0]) if pool else None
    full = traced_shape(by_name[red.data] if red else by_name[pool_value])
    out = _out_shape(red, full)
    order = [n for n in by_name if n in members]
    kinds = _kinds(order, anchor.name, red, pool, full, out, by_name, reach.below)
    if isinstance(kinds, str):
        return kinds
    classes = _check_operands(order, kinds, pool, full, out, by_name)
    if isinstance(classes, str):
        return classes
    for name in order:
        if kinds[name] == "tuple" or (kinds[name] == "anchor" and red.values):
            continue  # a (values, indices) tuple: read by its values access only
        if any(u.name not in members for u in by_name[name].users):
            if kinds[name] == "window":
                return (f"{name} (before the pool) is read outside the kernel: the kernel computes it per window "
                        "element and never writes it")
            if red and kinds[name] == "element":
                return (f"{name} (of the reduced tensor's shape) is read outside the kernel: a channel reduction "
                        "writes one value per (sample, position)")
            if tensor_meta(by_name[name]).dtype != torch.float32:
                return f"a kernel output ({name}) would not be float32"
    value = red.values if red and red.values else anchor.name
    reduced = tuple(n for n in order if kinds[n] == "reduced" or (red and n == value))
    window = tuple(n for n in order if kinds[n] == "window")
    return ChannelReduceSpec(anchor.name, red, tuple(classes.items()), reduced, full, out,
                             pool[1] if pool else None, pool[0] if pool else None, window)


class _Grower(GroupGrower):
    """Grows one group per recognised reduction from the pointwise groups and pools around it, then one pool
    kernel per pool that no reduction took in."""

    def __init__(self, claim: Claim, pointwise_groups: list[list[str]]):
        graph, elsewhere = claim.graph, claim.claimed
        pools: dict[str, Pool] = {}
        pool_reasons: dict[str, str] = {}
        units = list(pointwise_groups)  # then one unit per recognised pool: [pool, values access]
        pool_units: dict[str, int] = {}
        for node in graph.nodes:
            if pool_table.is_pool_op(node) and node.name not in elsewhere:
                try:
                    pool = pool_table.recognise(node)
                except NotSpellable as exc:
                    pool_reasons[node.name] = str(exc)
                    continue
                pools[node.name] = pool
                pool_units[node.name] = len(units)
                units.append([node.name, *([pool.values] if pool.values else [])])
        super().__init__(claim, units)
        self.pools, self.pool_units = pools, pool_units
        self.anchor_reasons.update(pool_reasons)

    def grow_reduction(self, anchor: fx.Node, red: ChannelReduction | None, members: set[str]) -> None:
        start = set(members)
        grown = self.grow(anchor.name, members, lambda members:
                          reduce_spec(members, anchor, red, self.by_name, self.reach, self.pools))
        if grown is None:
            return
        if red is None and grown[0] == start and not _reads_a_convolution(anchor):
            self.anchor_reasons[anchor.name] = ("no pointwise op joins it (a pool alone stays PyTorch's kernel, "
                                                "unless it reads a convolution's output)")
            return
        self.formed.append(grown)

    def grow_pools(self) -> None:
        for name, gi in self.pool_units.items():
            if gi not in self.taken:
                self.taken.add(gi)
                self.grow_reduction(self.by_name[name], None, set(self.units[gi]))
                if not any(name in members for members, _ in self.formed):
                    self.taken.discard(gi)


def _reads_a_convolution(pool: fx.Node) -> bool:
    """A pool of a convolution's output: alone, it is still a pool kernel, because that kernel reads its input
    channels-last as it is, so the convolution may run channels-last (the layout step), which cuDNN does faster."""
    source = pool.args[0]
    return isinstance(source, fx.Node) and str(source.target) in CONVS


def _edge_reason(grower: _Grower, mine: int, other: fx.Node, group_of: dict[str, int], elsewhere: set[str]) -> str | None:
    if other.name in group_of:
        return grower.two_anchors_reason(mine, group_of[other.name], "channel-reduction kernels",
                                         "a kernel holds one reduction")
    if other.name in elsewhere:
        return "in a row or channel-norm kernel: a kernel holds one reduction"
    return grower.outside_reason(other, lambda anchor: _anchor_reason(anchor, grower))


def _anchor_reason(anchor: str, grower: _Grower) -> str:
    op = op_key(grower.by_name[anchor])
    return f"{op} is not pointwise, nor a channel kernel: {grower.anchor_reasons[anchor]}"


def form_channel_reduction_groups(claim: Claim, pointwise_groups: list[list[str]], not_fused: list):
    """Channel-reduction groups grown from `pointwise_groups`: returns (pointwise groups left,
    [(members, ChannelReduceSpec)]); `not_fused` is updated: entries about group members are replaced by
    the groups' own, and a reduction over the channels that cannot be a kernel gets its reason.
    `claim.claimed`: members of row and channel-norm groups."""
    graph, elsewhere = claim.graph, claim.claimed
    grower = _Grower(claim, pointwise_groups)
    for node in graph.nodes:
        if not table.is_channel_reduction_op(node) or node.name in elsewhere:
            continue
        try:
            red = table.recognise(node)
        except NotSpellable as exc:
            if "not the channel axis" not in str(exc) and "row reduction" not in str(exc):
                grower.anchor_reasons[node.name] = str(exc)
            continue
        grower.grow_reduction(node, red, {node.name, *([red.values] if red.values else [])})
    grower.grow_pools()
    group_of = grower.group_of()
    kept = []
    for w in notes_outside(not_fused, group_of):
        anchor = next((n for n in (w.producer, w.consumer) if n in grower.anchor_reasons), None)
        if anchor is not None and w.reason.startswith(f"{op_key(grower.by_name[anchor])} is not pointwise"):
            w = WhyNotFused(w.producer, w.consumer, _anchor_reason(anchor, grower))
        kept.append(w)
    not_fused[:] = kept + edge_notes(
        grower, lambda i, other, after: _edge_reason(grower, i, other, group_of, elsewhere))
    return grower.untaken(pointwise_groups), grower.formed  # pool units come after the pointwise groups


def channel_reduction_reason(node: fx.Node) -> str | None:
    """Why a node of the channel-reduction table is not a channel-reduction kernel (None when it can be one)."""
    return recognise_reason(table.recognise, node)


def pool_reason(node: fx.Node) -> str:
    """Why a pool stays PyTorch's kernel: the pool table's reason, or that no pointwise op could join it."""
    try:
        pool_table.recognise(node)
    except NotSpellable as exc:
        return str(exc)
    return "no pointwise op after it could join it; see the reasons below"
