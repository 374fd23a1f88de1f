"""A roofline cost model: the expected time and activation memory of eager PyTorch and of the plan.

Each op (eager) or step (plan) costs max(FLOPs / compute rate, bytes moved / memory bandwidth) plus a
launch overhead. Eager moves every op's inputs and output through device memory; a generated kernel
reads its external inputs once and writes only its outputs: the saving of fusion is the intermediate
traffic and launches it removes. Memory is the peak of live intermediate tensors (parameters and
inputs are the same on both sides). The ceilings are those measured on an H100 (DESIGN/ENVIRONMENT).
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections import Counter
from dataclasses import dataclass

import torch
from torch import fx

from .capture import Captured
from .evaluate.conv_precision import ConvCall
from .layout_precision import conv_call, conv_has_bias, conversion_ms, is_conv, measured_ms
from .plan import KernelStep, Plan
from .rates import (
    BANDWIDTH,
    HOST_OP_S,
    LAUNCH_S,
    SGEMM_FLOPS,
    THIN_PRODUCT_BANDWIDTH,
    THIN_PRODUCT_COLUMNS,
    batch_norm_train_seconds,
    cudnn_conv_seconds,
)
from .traced import size_hint

READS_ONLY_METADATA = {"aten.new_ones.default", "aten.new_zeros.default", "aten.new_empty.default",
                       "aten.new_full.default", "aten.zeros_like.default", "aten.ones_like.default",
                       "aten.empty_like.default", "aten.full_like.default"}
VIEW_OPS = {"aten.view.default", "aten.reshape.default", "aten.permute.default", "aten.transpose.int",
            "aten.t.default", "aten.expand.default", "aten.unsqueeze.default", "aten.squeeze.dim",
            "aten.squeeze.dims", "aten.flatten.using_ints", "aten.alias.default", "aten.sym_size.int"}


def numel(node: fx.Node) -> int:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return math.prod(size_hint(s) for s in val.shape)
    return 0


def nbytes(node: fx.Node) -> int:
    val = node.meta.get("val")
    return numel(node) * val.element_size() if isinstance(val, torch.Tensor) else 0


def _is_free(node: fx.Node) -> bool:
    return node.target is operator.getitem or str(node.target) in VIEW_OPS


MATRIX_PRODUCTS = frozenset({"aten.linear.default", "aten.matmul.default", "aten.mm.default", "aten.bmm.default",
                             "aten.addmm.default"})


def is_product(node: fx.Node) -> bool:
    """A matrix product or a convolution: the ops that run on tensor cores at their best."""
    key = str(node.target)
    return node.op == "call_function" and (key in MATRIX_PRODUCTS or key.startswith("aten.conv"))


def flops(node: fx.Node) -> tuple[float, float]:
    """(FLOPs, rate) of one op: GEMMs and convolutions by their formulas, anything else 1 per output."""
    key = str(node.target)
    ins = [a for a in node.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)]
    if key in MATRIX_PRODUCTS and len(ins) >= 2:
        a = ins[1] if key == "aten.addmm.default" else ins[0]
        k = size_hint(a.meta["val"].shape[-1])
        return 2.0 * numel(node) * k, SGEMM_FLOPS
    if key.startswith("aten.conv") and len(ins) >= 2:
        fl = conv_flops(node)
        return fl, fl / conv_seconds(node)
    return float(numel(node)), SGEMM_FLOPS


def is_thin_product(node: fx.Node) -> bool:
    """A matrix product A @ B of a 2-D B with few columns (`rates.THIN_PRODUCT_COLUMNS`): cuBLAS reads A at
    `rates.THIN_PRODUCT_BANDWIDTH`, not at the copy rate."""
    b_at = {"aten.mm.default": 1, "aten.matmul.default": 1, "aten.linear.default": 1, "aten.addmm.default": 2}
    at = b_at.get(str(node.target))
    if at is None or len(node.args) <= at or not isinstance(node.args[at], fx.Node):
        return False
    val, b = node.meta.get("val"), node.args[at].meta.get("val")
    return (isinstance(val, torch.Tensor) and isinstance(b, torch.Tensor) and b.dim() == 2 and val.dim() >= 2
            and size_hint(val.shape[-1]) in THIN_PRODUCT_COLUMNS)  # a 2-D B: one product over A's rows


def conv_flops(node: fx.Node) -> float:
    """A convolution's FLOPs: two per product, one per output for the bias."""
    ins = [a for a in node.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)]
    w = ins[1].meta["val"]
    window = math.prod(size_hint(s) for s in w.shape[2:])
    if _transposed(node):  # each input element meets its group's C_out/groups weights of the whole window
        macs = numel(ins[0]) * size_hint(w.shape[1]) * window
    else:  # each output element sums C_in/groups inputs over the window
        macs = numel(node) * size_hint(w.shape[1]) * window
    return 2.0 * macs + _conv_with_bias(node) * numel(node)


def conv_seconds(node: fx.Node, channels_last: bool = False, exact_fp32: bool = False) -> float:
    """cuDNN's time on a convolution node, NCHW (eager's) or channels-last (a plan's layout step), measured rates
    (`rates.cudnn_conv_seconds`); `exact_fp32`: cuDNN was measured to run it in exact fp32."""
    ins = [a for a in node.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)]
    x, w = ins[0].meta["val"], ins[1].meta["val"]
    transposed = _transposed(node)
    channels = size_hint(x.shape[1]) if transposed else size_hint(w.shape[1])  # input channels (per group)
    terms = channels * math.prod(size_hint(s) for s in w.shape[2:])
    stride = node.args[3] if len(node.args) > 3 else 1
    strided = any(s != 1 for s in (stride if isinstance(stride, (list, tuple)) else [stride]))
    return cudnn_conv_seconds(numel(node), conv_flops(node), channels, terms, w.dim() - 2,
                              channels_last=channels_last, transposed=transposed, strided=strided,
                              bias=_conv_with_bias(node), exact_fp32=exact_fp32)


def channels_last_conv_seconds(node: fx.Node) -> float:
    """A plan's channels-last convolution: the input and weight converted (a read and a write each, one launch
    each), then cuDNN's channels-last call."""
    return conv_seconds(node, channels_last=True) + conversion_ms(node) / 1e3


def _transposed(node: fx.Node) -> bool:
    """aten.conv_transpose*, or aten.convolution with its `transposed` flag (its seventh argument)."""
    key = str(node.target)
    return "transpose" in key or (key == "aten.convolution.default" and len(node.args) > 6 and bool(node.args[6]))


def _conv_with_bias(node: fx.Node) -> bool:
    """A convolution given a bias tensor."""
    return str(node.target).startswith("aten.conv") and conv_has_bias(node)


def op_bytes(node: fx.Node) -> int:
    """Bytes one eager op moves: its inputs read and its output written (every tensor of a tuple: a norm's output
    and statistics). PyTorch adds a convolution's bias in a pass of its own after cuDNN's convolution (measured on
    the H100): one more read and write."""
    reads = [] if str(node.target) in READS_ONLY_METADATA else node.all_input_nodes
    return sum(nbytes(a) for a in reads) + _held_bytes(node) + (2 * nbytes(node) if _conv_with_bias(node) else 0)


TRAIN_MODE_BATCH_NORMS = frozenset({"aten._native_batch_norm_legit_functional.default",
                                    "aten._native_batch_norm_legit.default", "aten.native_batch_norm.default"})


def is_train_batch_norm(node: fx.Node) -> bool:
    """A batch norm computing its batch's statistics (its `training` argument, the sixth, true)."""
    return str(node.target) in TRAIN_MODE_BATCH_NORMS and len(node.args) > 5 and node.args[5] is True


def statistics_units(node: fx.Node) -> int | None:
    """The units an eager norm takes its input's statistics over, one block each, where it reads its input twice
    (statistics, then normalise) and writes once: a train-mode batch norm (its channels: cuDNN's kernel, measured,
    rates.py), an instance norm with its input's statistics (PyTorch runs it as that batch norm over the N x C
    channels of the input seen as [1, N * C, ...]) and a group norm (N x G units: PyTorch's statistics kernel, then
    its normalising one; from PyTorch's source, not measured). None for any other op."""
    shape = node.args[0].meta["val"].shape if node.args and isinstance(node.args[0], fx.Node) else None
    target = str(node.target)
    if is_train_batch_norm(node):
        return size_hint(shape[1])
    if target == "aten.instance_norm.default" and len(node.args) > 5 and node.args[5] is True:
        return size_hint(shape[0]) * size_hint(shape[1])
    if target == "aten.group_norm.default" and len(node.args) > 1:
        return size_hint(shape[0]) * int(node.args[1])
    return None


def _time(fl: float, rate: float, moved: int) -> float:
    return max(fl / rate, moved / BANDWIDTH) + LAUNCH_S


@dataclass
class CostEstimate:
    eager_s: float
    plan_s: float
    eager_bytes_moved: int
    plan_bytes_moved: int
    eager_launches: int
    plan_launches: int
    eager_peak_activation_bytes: int
    plan_peak_activation_bytes: int
    total_flops: float
    plan_torch_s: float = 0.0  # the part of plan_s spent in the ops the plan leaves as torch calls
    eager_peak_values: tuple[str, ...] = ()  # the values live at eager's peak
    plan_peak_values: tuple[str, ...] = ()  # the values live at the plan's peak
    plan_host_s: float = 0.0  # the host time of the plan's calls (HOST_OP_S each): a floor under plan_s
    plan_calls: int = 0
    eager_host_s: float = 0.0  # the same floor under eager_s: eager's own ops are issued from Python too
    eager_calls: int = 0
    eager_gpu_s: float = 0.0  # eager's GPU work alone (eager_s is its timeline's end: at least this and eager_host_s)
    plan_gpu_s: float = 0.0  # the plan's GPU work alone (plan_s is its timeline's end: at least this and plan_host_s)

    @property
    def speedup(self) -> float:
        return self.eager_s / self.plan_s if self.plan_s else 1.0

    @property
    def memory_saving(self) -> float:
        e = self.eager_peak_activation_bytes
        return 1.0 - self.plan_peak_activation_bytes / e if e else 0.0


def _peak(units: list[tuple[list[str], list[str]]], sizes: dict[str, int]) -> tuple[int, tuple[str, ...]]:
    """Peak live bytes when each unit allocates its outputs and frees values after their last use, and the
    values (of nonzero size) live at that peak."""
    last = {}
    for i, (reads, _) in enumerate(units):
        for r in reads:
            last[r] = i
    live, peak, held = {}, 0, ()
    for i, (reads, writes) in enumerate(units):
        for w in writes:
            live[w] = sizes.get(w, 0)
        if sum(live.values()) > peak:
            peak, held = sum(live.values()), tuple(v for v, b in live.items() if b)
        for r in reads:
            if last.get(r) == i:
                live.pop(r, None)
    return peak, held


@dataclass(frozen=True)
class EagerCost:
    """What eager PyTorch does for the captured graph (taken before any rewrite)."""

    seconds: float
    bytes_moved: int
    launches: int
    peak_activation_bytes: int
    flops: float
    peak_values: tuple[str, ...] = ()  # the values live at the peak
    convs: tuple[PricedConv, ...] = ()  # its convolutions as priced, for `estimate` to use measured times instead
    calls: int = 0  # ops eager issues from Python, views included (each takes host time, as the plan's calls do)
    call_seconds: tuple[float, ...] = ()  # each call's GPU seconds, in order (views: 0), for eager's timeline


@dataclass(frozen=True)
class PricedConv:
    """A convolution of eager's graph: its call without the bias (the key its measurement is found by), whether
    it has a bias, and the seconds the rates priced it at: not knowing eager's precision class on it, and where
    cuDNN runs it in exact fp32."""

    key: ConvCall
    bias: bool
    seconds: float
    exact_fp32_seconds: float
    call: int = -1  # its place among eager's calls (`EagerCost.call_seconds`)


def measurement_key(node: fx.Node) -> ConvCall:
    """The call a convolution node makes, bias cleared: eager's convolution and the plan's (its bias rewritten into
    the kernel after it) share it."""
    return dataclasses.replace(conv_call(node), bias=False)


def measured_conv_seconds(row: dict, bias: bool, channels_last: bool = False) -> float | None:
    """A convolution's time as the GPU measured it before planning (`layout_precision.measured`: cuDNN's call in
    that layout, with or without its bias pass), or None unmeasured."""
    ms = measured_ms(row, bias, channels_last)
    return None if ms is None else ms / 1e3


def _op_cost(n: fx.Node) -> tuple[float, float, int]:
    """(seconds, FLOPs, bytes moved) of one op; factory ops like new_ones read no data of their input."""
    moved = op_bytes(n)
    fl, rate = flops(n)
    units = statistics_units(n)
    if units is not None:  # three passes over the input (two reads, a write), a block per unit
        seconds = batch_norm_train_seconds(nbytes(n.args[0]), units) + LAUNCH_S
        return max(seconds, _time(fl, rate, moved)), fl, moved
    if is_thin_product(n):
        return max(fl / rate, moved / THIN_PRODUCT_BANDWIDTH) + LAUNCH_S, fl, moved
    return _time(fl, rate, moved), fl, moved


def _held_bytes(node: fx.Node) -> int:
    """Bytes a value holds in memory: a tensor's, or the sum of a tuple's tensors (batch norm's output and
    statistics; the tuple accesses after it hold nothing of their own)."""
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):
        return sum(math.prod(size_hint(s) for s in t.shape) * t.element_size()
                   for t in val if isinstance(t, torch.Tensor))
    return nbytes(node)


def _sizes(by_name: dict[str, fx.Node]) -> dict[str, int]:
    return {n: 0 if _is_free(by_name[n]) else _held_bytes(by_name[n]) for n in by_name}


def compute_ops(graph: fx.Graph) -> Counter:
    """The ops of a graph that compute (not views, tuple accesses or inputs), counted by ATen overload."""
    return Counter(str(n.target) for n in graph.nodes if n.op == "call_function" and not _is_free(n))


def eager_cost(captured: Captured) -> EagerCost:
    """Cost eager's op sequence; call it on the graph as captured, before the rewrite stage changes it."""
    by_name = {n.name: n for n in captured.graph.nodes}
    ops = [n for n in captured.graph.nodes if n.op == "call_function"]
    seconds, moved, launches, total_flops = 0.0, 0, 0, 0.0
    convs, call_seconds = [], []
    for n in ops:
        t = 0.0
        if not _is_free(n):
            t, fl, m = _op_cost(n)
            seconds, moved, launches, total_flops = seconds + t, moved + m, launches + 1, total_flops + fl
            if is_conv(n):
                exact = t - conv_seconds(n) + conv_seconds(n, exact_fp32=True)
                convs.append(PricedConv(measurement_key(n), _conv_with_bias(n), t, exact, len(call_seconds)))
        if n.target is not operator.getitem:  # a tuple's item is no call of eager's
            call_seconds.append(t)
    units = [([a.name for a in n.all_input_nodes], [n.name]) for n in ops]
    keep = [([o for o in captured.user_outputs if o], [])]  # outputs stay alive to the end
    peak, held = _peak(units + keep, _sizes(by_name))
    return EagerCost(seconds, moved, launches, peak, total_flops, held, tuple(convs), len(call_seconds),
                     tuple(call_seconds))


def _eager_measured(eager: EagerCost, by_key: dict[ConvCall, dict]) -> list[float]:
    """Eager's calls' GPU seconds with each measured convolution at its measured NCHW time in place of its price, or
    where only its precision class was measured and it is exact fp32, at that class's price."""
    seconds = list(eager.call_seconds)
    for conv in eager.convs:
        row = by_key.get(conv.key, {})
        t = measured_conv_seconds(row, conv.bias)
        if t is None and row.get("class") == "fp32":
            t = conv.exact_fp32_seconds
        if t is not None:
            seconds[conv.call] = t
    return seconds


class Timeline:
    """A forward's calls in order: the host issues each in HOST_OP_S, the GPU starts a call's work once it is issued
    and the previous call's work is done. Its end is the forward's time: the GPU work's sum where the calls are long,
    the host's issuing where they are short, and between the two where long work comes after many short calls (the
    GPU idles until the long call is issued, and the host is still issuing after it)."""

    def __init__(self) -> None:
        self.host = 0.0
        self.gpu = 0.0

    def call(self, gpu_seconds: float) -> None:
        self.host += HOST_OP_S
        self.gpu = max(self.gpu, self.host) + gpu_seconds

    @property
    def end(self) -> float:
        return max(self.gpu, self.host)


def estimate(eager: EagerCost, captured: Captured, plan: Plan, measured: dict[str, dict] | None = None) -> CostEstimate:
    """Cost the plan (over the rewritten graph) and set it next to eager's cost. `measured`: convolutions (plan node
    name -> `layout_precision.measured` row) timed on the GPU before planning; eager's and the plan's calls of them
    cost their measured times, not the rates' price."""
    by_name = {n.name: n for n in captured.graph.nodes}
    rows = {name: row for name, row in (measured or {}).items() if name in by_name and isinstance(row, dict)}
    timed = {name: row for name, row in rows.items() if "ms_nchw" in row}
    by_key = {measurement_key(by_name[name]): row for name, row in rows.items()}  # times, or classes only
    plan_s, plan_moved, plan_launches, torch_s = 0.0, 0, 0, 0.0
    timeline = Timeline()
    units = []
    for step in plan.steps:
        t = 0.0  # the step's GPU seconds (a view: none)
        if isinstance(step, KernelStep):
            g = step.group
            moved = sum(nbytes(by_name[i]) for i in g.inputs) + sum(nbytes(by_name[o]) for o in g.outputs)
            t = _time(float(numel(by_name[g.outputs[0]]) * len(g.nodes)), SGEMM_FLOPS, moved)
            own = g.family.seconds(g, by_name) if g.family is not None else None  # a family's own rate
            t = own if own is not None else t
            launches = g.family.launches(g) if g.family is not None else 1
            plan_s, plan_moved, plan_launches = plan_s + t, plan_moved + moved, plan_launches + launches
            units.append((list(g.inputs), list(g.outputs)))
        else:
            n = by_name[step.node]
            units.append(([a.name for a in n.all_input_nodes], [n.name]))
            if not _is_free(n):
                t, _, m = _op_cost(n)
                if n.name in plan.channels_last:  # cuDNN's channels-last kernels, after the operands' conversion
                    t = channels_last_conv_seconds(n) + LAUNCH_S
                if n.name in timed:  # measured; channels-last after the extension's conversions
                    cl = n.name in plan.channels_last
                    t = measured_conv_seconds(timed[n.name], _conv_with_bias(n), cl) + (conversion_ms(n) / 1e3 if cl
                                                                                          else 0.0)
                plan_s, plan_moved, plan_launches, torch_s = plan_s + t, plan_moved + m, plan_launches + 1, torch_s + t
        timeline.call(t)
    keep = [([o for o in captured.user_outputs if o], [])]
    peak, held = _peak(units + keep, _sizes(by_name))
    # Each call of the emitted forward (a kernel's binding, a torch op, a view) takes host time to issue, and the GPU
    # runs a call's work once it is issued and the work before it is done: the forward takes its timeline's end
    # eager's forward issues its ops from Python as well: 29-87 us per captured op on the H100 machine (its enqueue
    # time over 4-6 ops, bench/results/2026-11-27i_gpu/host_*.json; convolutions cost the most), so HOST_OP_S each
    # is a floor: a small, many-op model is host-bound in both
    eager_calls = _eager_measured(eager, by_key)
    eager_timeline = Timeline()
    for t in eager_calls:
        eager_timeline.call(t)
    return CostEstimate(eager_timeline.end, timeline.end, eager.bytes_moved, plan_moved, eager.launches,
                        plan_launches, eager.peak_activation_bytes, peak, eager.flops, torch_s, eager.peak_values, held,
                        timeline.host, len(plan.steps), eager_timeline.host, eager.calls, sum(eager_calls), plan_s)
