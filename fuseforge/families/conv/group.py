"""Convolution groups: a convolution and the pointwise chain after it, as one convolution kernel whose epilogue
computes the chain: the direct fp32 kernel (`direct.cuh`) for short dot products, the TF32 implicit-GEMM
kernel on tensor cores (`igemm.cuh`) for longer ones that eager itself runs in TF32.

Each anchor (`recognise`: aten.conv2d, conv3d, convolution (not transposed), conv_transpose2d or conv_transpose3d, one
group, float32, a static weight) becomes a conv group where one of the kernels can take it:
- the direct kernel: a dot product of at most `rates.SHORT_DOT_TERMS` products (input channels x window) over at
  most `rates.SHORT_DOT_CHANNELS` input channels, the range measured on an H100 (`rates.CONV_DIRECT_FLOPS`), and
  a tiling (`tiling.py`) that fits;
- the implicit-GEMM kernel: stride 1, at least `IGEMM_MIN_CHANNELS` input channels, and eager's cuDNN measured
  TF32-class on this convolution on the GPU (the node's `EAGER_CLASS` meta, which the pipeline sets before
  partitioning where it has a GPU: `mark_eager_classes`). A TF32 kernel where eager is exact fp32 would fall
  outside the verifier's bound; without a measurement the convolution stays cuDNN's. A transposed convolution (no
  dilation, a window at least its stride) is this kernel's alone: per output parity class a stride-1 convolution
  (`parity.py`; igemm.cuh's launch_transposed), sized by the largest class.
The group then takes in the neighbouring pointwise groups while the whole stays a conv group:

- convex (no path leaves the group and comes back);
- the convolution's input and weight are not members (the kernel reads them from memory: no prologue);
- every other member is pointwise, float32 or bool, and broadcasts to the convolution's output F = [N, K, ...];
- every external input of the epilogue is float32 and *full* (shape F), *per channel* (K at axis 1) or a
  *scalar*; the convolution's own bias is read per channel;
- every output of the group is float32 of shape F.

The group is kept where the kernel is expected faster than cuDNN's convolution plus, where the group has an
epilogue, the pass over the convolution's output it saves. The conv family claims after the row and channel
families, so an epilogue holds only the pointwise ops no reduction, norm or pool kernel took in as its prologue
(a 2-D convolution of 8 channels runs as fast in cuDNN as in the direct kernel: it pays only through that pass).

One exception: a group may end in a *reduction* of the epilogue's last value (`reduction.py`), which is then the
group's only output (the tensor-core kernel: a channel reduction only):
- a *spatial sum*: a sum or mean over all the convolution's spatial axes (global average pooling is such a mean),
  one value per (n, k): sum_s f(conv(x, w))[n, k, s] is summed as the values are computed;
- a *channel reduction*: amin, amax, sum or mean over the output channels (dim 1; `torch.min(x, 1)[0]` too), one
  value per position, where one block holds every output channel (the direct kernel's channel group >= K, the
  tensor-core kernel's tile of BN channels >= K).
Either way the convolution's output is never written. Or (the direct kernel, or the TF32 tensor-core kernel) it may go
into a *channel norm* (`norm.py`): a train-mode
batch norm, a group norm or an instance norm of the epilogue's last value, with the pointwise ops around the norm that
a channel kernel pair takes; the kernel then stores its output and takes the norm's statistics as it does, and the
channel kernels only normalise. Such groups are formed before any family claims
(`form_conv_reduction_groups`, the family's `claim_first`): the row, channel-reduction or channel-norm family would
take the same reduction or norm with the epilogue as its prologue and leave the convolution to cuDNN, whose output it
must then read back.
They are kept where the kernel is expected faster than cuDNN plus that read (the norm's: its statistics pass). The
group grows as an epilogue group does; where what it grew is not one value read only by one reduction or channel norm,
the convolution is left to `form_conv_groups`.
"""

from __future__ import annotations

import dataclasses
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
from ...traced import tensor_meta, traced_shape
from ..base import EpilogueOperands, broadcasts_to, operand_class
from . import tiling
from .anchor import ConvAnchor
from .norm import ConvNorm, grow_norm
from .parity import class_tap_counts, transposed_reason
from .price import CUDNN_MEASURED, direct_seconds, igemm_seconds, slower_than_cudnn
from .reduction import ConvReduction, recognise_reduction

CONV_OPS = {"aten.conv2d.default": "conv2d", "aten.conv3d.default": "conv3d",
            "aten.convolution.default": "convolution", "aten.conv_transpose2d.input": "conv_transpose2d",
            "aten.conv_transpose3d.input": "conv_transpose3d"}
EAGER_CLASS = "ff_eager_conv_class"  # node meta: "tf32" or "fp32", eager's cuDNN on this convolution, measured
# The implicit-GEMM kernel's k-tile is 32 input channels: at 8 it ran 0.48x and at 4 0.27x of torch.compile, at 16
# 0.95-0.98x, at 32 and more 1.0-1.8x (conv + bias + relu, H100, bench/results/2026-11-27b_h100/conv_igemm)
IGEMM_MIN_CHANNELS = 16
SPLIT_MIN_CHANNELS = 8  # the 3xTF32 kernel's chunks are 8 channels of one tap


@dataclass(frozen=True)
class ConvSpec(EpilogueOperands):
    """How a conv kernel sees its group: the anchor and its epilogue operands' classes (and its spatial sum)."""

    anchor: str
    conv: ConvAnchor
    operands: tuple[tuple[str, str], ...]  # (epilogue input, class): full, channel or scalar
    full_shape: tuple  # the convolution's output shape F (symbolic sizes as names)
    reduction: ConvReduction | None = None  # the reduction the group ends in, if it does
    norm: ConvNorm | None = None  # the channel norm (and its ops) the kernel's output goes into, if it does



def is_conv_op(node: fx.Node) -> bool:
    return node.op == "call_function" and str(node.target) in CONV_OPS


def _triple(value, dims: int, fill: int) -> tuple[int, int, int] | None:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not all(isinstance(v, int) for v in values):
        return None
    if len(values) == 1:
        values = values * dims
    if len(values) != dims:
        return None
    return tuple([fill] * (3 - dims) + values)


def recognise(node: fx.Node, one_channel_tile: bool = False) -> ConvAnchor | str:
    """The anchor's convolution (with the direct kernel's or the implicit-GEMM kernel's tiling; `one_channel_tile`:
    the latter's tile holding every output channel where there are at most 128, for a reduction over them), or why it
    is no conv kernel."""
    op = CONV_OPS[str(node.target)]
    a = pointwise.bind_arguments(node, lambda n: n)
    x, w, bias = a["input"], a["weight"], a.get("bias")
    for role, t in (("input", x), ("weight", w), ("bias", bias)):
        if t is None and role == "bias":
            continue
        if not isinstance(t, fx.Node) or tensor_meta(t) is None:
            return f"its {role} is not a tensor"
        if tensor_meta(t).dtype != torch.float32:
            return f"its {role} ({t.name}) has dtype {tensor_meta(t).dtype}; the conv kernels read float32"
    if op == "convolution" and (a.get("transposed") or any(a.get("output_padding") or [])):
        return "a transposed convolution written as aten.convolution (the conv kernels take conv_transpose ops)"
    transposed = op.startswith("conv_transpose")
    if a.get("groups", 1) != 1:
        return f"a grouped convolution ({a.get('groups')} groups)"
    rank = tensor_meta(x).dim()
    if rank not in (4, 5):
        return f"a convolution of a rank-{rank} input (the conv kernels take 2-D and 3-D ones)"
    dims = rank - 2
    wshape = tuple(tensor_meta(w).shape)
    if not all(isinstance(s, int) for s in wshape) or len(wshape) != rank:
        return "its weight's shape is not static"
    k, c, window = wshape[0], wshape[1], _triple(list(wshape[2:]), dims, 1)
    if transposed:  # the weight of a transposed convolution is [C, K, window]
        k, c = c, k
    geometry = [_triple(a.get(key), dims, fill) for key, fill in (("stride", 1), ("padding", 0), ("dilation", 1))]
    if any(g is None for g in geometry):
        return "its stride, padding or dilation is not a list of ints"
    terms = c * window[0] * window[1] * window[2]
    out = traced_shape(node)
    if not all(isinstance(s, int) for s in out[1:]):
        return "its output's spatial size is not static"
    bias_name = bias.name if isinstance(bias, fx.Node) else None
    if transposed:
        why = transposed_reason(window, *geometry)
        if why:
            return why
        output_padding = _triple(a.get("output_padding"), dims, 0)
        if output_padding is None:
            return "its output padding is not a list of ints"
        igemm = _igemm_tiling(node, dims, c, k, (1, 1, 1), tuple(geometry[0]),
                              class_tap_counts(window, geometry[0], geometry[1]), one_channel_tile)
        if isinstance(igemm, str):
            return f"a transposed convolution: the tensor-core kernel takes it as one convolution per output parity, but {igemm}"
        return ConvAnchor(op, x.name, w.name, bias_name, dims, c, k, window, *geometry, igemm, True, output_padding)
    if not rates.is_short_dot(c, terms):
        igemm = _igemm_tiling(node, dims, c, k, tuple(geometry[0]), taps=(terms // c,),
                              one_channel_tile=one_channel_tile)
        if isinstance(igemm, str):
            return (f"{c} input channels x a {'x'.join(map(str, window[3 - dims:]))} window = {terms} products per "
                    f"output: past the direct kernel's measured range ({rates.SHORT_DOT_CHANNELS} channels, "
                    f"{rates.SHORT_DOT_TERMS} products), and {igemm}")
        return ConvAnchor(op, x.name, w.name, bias_name, dims, c, k, window, *geometry, igemm)
    tiles = tiling.choose(c, k, window, geometry[0], geometry[2], out[-2])
    if isinstance(tiles, str):
        return tiles
    return ConvAnchor(op, x.name, w.name, bias_name, dims, c, k, window, *geometry, tiles)


def igemm_candidate(node: fx.Node) -> bool:
    """Whether the implicit-GEMM kernel could take this convolution once eager's precision class on it is known:
    the convolution the pipeline measures before partitioning."""
    if not is_conv_op(node):
        return False
    conv = recognise(node)
    return isinstance(conv, str) and conv.endswith(_UNMEASURED)


_UNMEASURED = "eager's precision on it was not measured (no GPU at plan time): cuDNN stays"


def assumed_class(node: fx.Node) -> str:
    """The precision class in which the implicit-GEMM kernel can take an unmeasured candidate convolution (for
    `--every-kernel` without a GPU): "tf32", or "fp32" (the 3xTF32 form) below IGEMM_MIN_CHANNELS input channels."""
    channels = tensor_meta(node.all_input_nodes[0]).shape[1]
    return "tf32" if isinstance(channels, int) and channels >= IGEMM_MIN_CHANNELS else "fp32"


def _igemm_tiling(node: fx.Node, dims: int, c: int, k: int, stride: tuple[int, int, int],
                  parities: tuple[int, int, int] = (1, 1, 1), taps: tuple[int, ...] = (1,),
                  one_channel_tile: bool = False) -> tiling.IgemmTiling | str:
    """The implicit-GEMM kernel's tiling of the convolution (of a transposed one with strides `parities`: of its
    largest output parity class; `taps`: each class's taps; `one_channel_tile`: a tile of every output channel where
    there are at most 128), or why that kernel does not take it: TF32 where eager's cuDNN runs TF32, 3xTF32 where it
    runs exact fp32 (both measured on the GPU)."""
    if stride != (1, 1, 1):
        return "the tensor-core kernel takes stride 1 only: cuDNN stays"
    if c < SPLIT_MIN_CHANNELS:
        return (f"the tensor-core kernel's k-tiles would be mostly zeros at {c} input channels (its chunks are 8 "
                "channels of one tap): cuDNN stays")
    measured = node.meta.get(EAGER_CLASS)
    if measured is None:
        return "the tensor-core kernel runs TF32 or 3xTF32 as eager's precision class is; " + _UNMEASURED
    x = tensor_meta(node.all_input_nodes[0])
    w_in = x.shape[-1]
    if not isinstance(w_in, int):
        return "its input's width is not static"
    out = traced_shape(node)
    extents = tuple(-(-e // s) for e, s in zip((out[2] if dims == 3 else 1, out[-2], out[-1]), parities))
    bn = 128 if one_channel_tile and 64 < k <= 128 else None  # a tile of every output channel (else the rule's)
    if measured == "fp32":  # 3xTF32: fp32-class products
        return tiling.choose_split_igemm(c, k, extents, taps, bn=bn)
    if c < IGEMM_MIN_CHANNELS:
        return (f"the tensor-core kernel's 32-channel k-tiles would be mostly zeros at {c} input channels (TF32 "
                f"measured slower than cuDNN below {IGEMM_MIN_CHANNELS}): cuDNN stays")
    return tiling.choose_igemm(dims, c, k, w_in, extents, bn=bn)


def epilogue_anchor(node: fx.Node) -> ConvAnchor | str:
    """The convolution as a group with no reduction or norm would compute it (`recognise`, with the 3xTF32 kernel in
    place of the direct one where that is priced faster), or why it is no conv kernel."""
    conv = recognise(node)
    return conv if isinstance(conv, str) else split_alternative(node, conv) or conv


def split_alternative(node: fx.Node, conv: ConvAnchor) -> ConvAnchor | None:
    """The 3xTF32 tensor-core kernel in place of the direct kernel on an fp32-class convolution (eager's cuDNN
    measured exact fp32 on it), where it is priced faster; else None. Only for a group with no reduction or norm (the
    direct kernel's alone)."""
    if conv.kernel != "direct" or conv.transposed or node.meta.get(EAGER_CLASS) != "fp32":
        return None
    split = _igemm_tiling(node, conv.dims, conv.c, conv.k, conv.stride, taps=(conv.terms // conv.c,))
    if isinstance(split, str):
        return None
    alternative = dataclasses.replace(conv, tiling=split)
    return alternative if igemm_seconds(node, alternative) < direct_seconds(node, conv) else None


def mark_measured(graph: fx.Graph, rows: dict[str, dict]) -> None:
    """Record each named convolution's measurement (`layout_precision.measured` rows) on its node: eager's precision
    class and, where the row has them (a GPU's), cuDNN's times, at which `price.slower_than_cudnn` then prices cuDNN."""
    mark_eager_classes(graph, {name: row["class"] for name, row in rows.items() if "class" in row})
    for node in graph.nodes:
        row = rows.get(node.name)
        if isinstance(row, dict) and "ms_nchw" in row:
            node.meta[CUDNN_MEASURED] = row


def mark_eager_classes(graph: fx.Graph, classes: dict[str, str]) -> None:
    """Record eager's measured precision class ("tf32"/"fp32") of each named convolution on its node."""
    for node in graph.nodes:
        if node.name in classes:
            node.meta[EAGER_CLASS] = classes[node.name]


def conv_spec(members: set[str], anchor: fx.Node, conv: ConvAnchor, by_name, reach,
              reduction: ConvReduction | None = None) -> ConvSpec | str:
    """The group's ConvSpec, or why `members` cannot be one direct conv kernel (ending in `reduction`, a member,
    where given)."""
    if not reach.convex(members):
        return "fusing would create a cycle through an op outside the kernel"
    full = traced_shape(anchor)
    if reduction is not None:
        if conv.kernel == "igemm" and reduction.over != "channels":
            return "the tensor-core kernel reduces over the channels only (a spatial sum is the direct kernel's)"
        if conv.kernel == "shift" and reduction.over != "spatial":
            return "the shifted-tap kernel reduces over the spatial axes only"
        if reduction.data not in members:
            return f"the reduction reads {reduction.data}, which the kernel does not compute"
        if reduction.over == "channels":
            why = _channel_reduction_reason(conv)
            if why:
                return why
        inner = members - reduction.members
        leaving = [n for n in inner if any(u.name not in members for u in by_name[n].users)]
        if leaving:
            return (f"{leaving[0]} is read outside the kernel, which would have to write the convolution's output "
                    "as well as reduce it")
        spec = conv_spec(inner, anchor, conv, by_name, reach)
        return spec if isinstance(spec, str) else dataclasses.replace(spec, reduction=reduction)
    order = [n for n in by_name if n in members]
    for operand in (conv.x, conv.w):
        if operand in members:
            return f"{operand} is an operand of the convolution: its main loop reads it from memory (no prologue fusion)"
    classes: dict[str, str] = {}
    for name in order:
        node = by_name[name]
        if name != anchor.name:
            meta = tensor_meta(node)
            if meta is None or meta.dtype not in (torch.float32, torch.bool):
                return f"{name} has dtype {getattr(meta, 'dtype', None)}; the conv epilogue computes float32"
            if not broadcasts_to(traced_shape(node), full):
                return (f"{name} has shape {list(traced_shape(node))}, which does not broadcast to the convolution's "
                        f"output {list(full)}: the epilogue computes one value per output element")
        reads = [conv.bias] if name == anchor.name else [a.name for a in node.all_input_nodes]
        for arg in reads:
            if arg is None or arg in members:
                continue
            meta = tensor_meta(by_name[arg])
            if meta is None or meta.dtype != torch.float32:
                return f"input {arg} of {name} has dtype {getattr(meta, 'dtype', None)}; the epilogue reads float32"
            cls = "channel" if arg == conv.bias else operand_class(traced_shape(by_name[arg]), full)
            if cls is None:
                return (f"input {arg} of shape {list(traced_shape(by_name[arg]))} broadcasts neither per element, per "
                        f"channel nor as a scalar against the convolution's output {list(full)}")
            classes[arg] = cls
        if any(u.name not in members for u in node.users):
            if tensor_meta(node).dtype != torch.float32 or traced_shape(node) != full:
                return f"a kernel output ({name}) would not be float32 of the convolution's output shape {list(full)}"
    return ConvSpec(anchor.name, conv, tuple(classes.items()), full)


def _channel_reduction_reason(conv: ConvAnchor) -> str | None:
    """Why the conv kernel cannot reduce this convolution's values over its channels (None: it can): a block must hold
    every output channel."""
    t = conv.tiling
    if conv.kernel == "igemm":
        if t.bn < conv.k:
            return (f"a tile of the tensor-core kernel holds {t.bn} of the {conv.k} output channels: it cannot reduce "
                    "over them")
        return None
    if t.kpt * t.wk < conv.k:
        return (f"a block of the direct kernel holds {t.kpt * t.wk} of the {conv.k} output channels: it cannot reduce "
                "over them")
    if tiling.smem_bytes(t, conv.c, conv.window, conv.stride, conv.dilation, channel_reduce=True) > tiling.SMEM_LIMIT:
        return "its channel reduction's partials would not fit in shared memory beside the tiles"
    return None


# The shifted-descriptor tensor-core kernel (`shift.cuh`) sums a convolution's values over its spatial axes at 2.0-2.4x
# the direct kernel's rate on the 8-channel problem shapes (bench/results/2026-11-29e_gpu, its lab), but it has not run
# from a generated plan on a GPU yet: until its GPU tests pass, only `--every-kernel` plans (the tests, the fuzz) take
# it, and the cost model does not weigh it against the direct kernel.
def shift_anchor(node: fx.Node, conv: ConvAnchor) -> ConvAnchor:
    """The direct kernel's convolution as the shifted-descriptor kernel's where that kernel takes it, else as it was."""
    if conv.kernel != "direct":
        return conv
    w_in = traced_shape(node.all_input_nodes[0])[-1]
    if not isinstance(w_in, int):
        return conv
    band = tiling.choose_shift(conv.c, conv.window, conv.stride, conv.dilation, conv.padding, conv.dims, w_in)
    return conv if isinstance(band, str) else dataclasses.replace(conv, tiling=band)


def _reduction_of(members: set[str], by_name) -> ConvReduction | None:
    """The reduction that is the only reader of the group's only output, if there is one."""
    outputs = [n for n in members if any(u.name not in members for u in by_name[n].users)]
    if len(outputs) != 1 or len(by_name[outputs[0]].users) != 1:
        return None
    return recognise_reduction(next(iter(by_name[outputs[0]].users)))


# The tensor-core kernel's statistics epilogue (store_tile_stats) matches float64 but was slower than the same kernel's
# plain epilogue followed by the channel kernels' statistics pass, on both problem models the price gave it to
# (H200, bench/results/2026-11-29b_gpu: 61, a transposed 3-D conv into a group norm, 2.063 ms against 1.785; 77, into
# a batch norm, 3.839 against 3.561): the pass it saves is cheaper than what it adds to the conv kernel (its stores
# unstaged, the doubles' shuffles and atomics). Until it is faster, only `--every-kernel` plans (the tests, the
# fuzz) give the tensor-core kernel a channel norm; the direct kernel takes one where priced faster.
def _statistics_anchor(conv: ConvAnchor, every_kernel: bool) -> ConvAnchor | None:
    """The convolution as a kernel that adds its output's statistics for a channel norm as it stores it, or None where
    none does: the direct kernel; the tensor-core kernel's TF32 form with --every-kernel only, as measured above, and
    launched a block a tile (statistics need one: a persistent instance is launched so instead; the 3xTF32 form runs
    persistent only)."""
    t = conv.tiling
    if conv.kernel == "direct":
        return conv
    if not every_kernel or t.split or t.cluster > 1:
        return None
    return dataclasses.replace(conv, tiling=dataclasses.replace(t, persistent=False)) if t.persistent else conv


def _with_norm(grower: GroupGrower, claim: Claim, node: fx.Node, conv: ConvAnchor, members: set[str],
               spec: ConvSpec) -> tuple[set[str], ConvSpec] | None:
    """The conv group `members` with the channel norm its output goes into (`norm.py`), where there is one and the
    kernel is expected to pay with it."""
    found = grow_norm(grower, members, claim.reach)
    if found is None or (not claim.every_kernel and slower_than_cudnn(node, conv, "norm")):
        return None
    norm_members, norm = found
    return members | norm_members, dataclasses.replace(spec, conv=conv, norm=norm)


def form_conv_reduction_groups(claim: Claim, pointwise_groups: list[list[str]], not_fused: list):
    """Conv groups that end in a reduction or go into a channel norm, grown from `pointwise_groups` before any
    family claims: returns (pointwise groups left, [(members, ConvSpec)]). A convolution whose grown group ends in
    neither, or whose kernel is not expected to pay with it, is left for `form_conv_groups`."""
    grower = GroupGrower(claim, pointwise_groups)
    for node in claim.graph.nodes:
        if not is_conv_op(node) or node.name in claim.claimed:
            continue
        conv = recognise(node)
        if isinstance(conv, str):
            continue
        taken = set(grower.taken)
        grown = grower.grow(node.name, {node.name}, lambda members, node=node, conv=conv:
                            conv_spec(members, node, conv, grower.by_name, claim.reach))
        reduction = grown and _reduction_of(grown[0], grower.by_name)
        if reduction and reduction.over == "channels" and conv.kernel == "igemm" and conv.tiling.bn < conv.k:
            wide = recognise(node, one_channel_tile=True)  # one tile of every channel, where there are <= 128
            conv = wide if not isinstance(wide, str) else conv
        if reduction and reduction.over == "spatial" and claim.every_kernel:
            conv = shift_anchor(node, conv)
        spec = reduction and conv_spec(grown[0] | reduction.members, node, conv, grower.by_name, claim.reach, reduction)
        if reduction and not isinstance(spec, str) and \
                (claim.every_kernel or not slower_than_cudnn(node, conv, "reduction")):
            grower.formed.append((grown[0] | reduction.members, spec))
            continue
        with_stats = grown and not reduction and _statistics_anchor(conv, claim.every_kernel)
        with_norm = with_stats and _with_norm(grower, claim, node, with_stats, *grown)
        if with_norm:
            grower.formed.append(with_norm)
            continue
        grower.taken = taken  # its units stay for the other families
        grower.anchor_reasons.pop(node.name, None)
    conv_of = grower.group_of()
    last_op = "a conv kernel's reduction is its last op (the ops after it read the reduced values)"
    after_norm = ("the normalising kernel after a conv kernel computes pointwise ops element by element (a reduction "
                  "or pool reads the whole normalised tensor)")

    def edge_reason(i, other, after):
        red = grower.formed[i][1].reduction
        if red and after and other.op == "call_function" and any(a.name == red.output for a in other.all_input_nodes):
            return f"{pointwise.op_key(other)} reads the reduced values: {last_op}"
        return epilogue_edge_reason(grower, i, other, conv_of, after, "conv", "a conv kernel holds one convolution",
                                    last_op if red else after_norm)

    not_fused[:] = notes_outside(not_fused, conv_of) + edge_notes(grower, edge_reason)
    return grower.untaken(pointwise_groups), grower.formed


def form_conv_groups(claim: Claim, pointwise_groups: list[list[str]], not_fused: list):
    """Conv groups grown from `pointwise_groups`: returns (pointwise groups left, [(members, ConvSpec)])."""
    grower = GroupGrower(claim, pointwise_groups)
    for node in claim.graph.nodes:
        if not is_conv_op(node) or node.name in claim.claimed:  # claimed: a group ending in a spatial sum
            continue
        conv = epilogue_anchor(node)
        if isinstance(conv, str):
            grower.anchor_reasons[node.name] = conv
            continue
        taken = set(grower.taken)
        grown = grower.grow(node.name, {node.name}, lambda members, node=node, conv=conv:
                            conv_spec(members, node, conv, grower.by_name, claim.reach))
        tail = "epilogue" if grown and len(grown[0]) > 1 else ""
        slower = grown and not claim.every_kernel and slower_than_cudnn(node, conv, tail)
        if slower:  # the group as grown is not worth it: its units go back to the pointwise kernels
            grower.anchor_reasons[node.name] = slower
            grower.taken = taken
            continue
        if grown:
            grower.formed.append(grown)
    conv_of = grower.group_of()
    kept = restate_anchor_notes(notes_outside(not_fused, conv_of), grower.anchor_reasons, "conv")
    not_fused[:] = kept + edge_notes(grower, lambda i, other, after: epilogue_edge_reason(
        grower, i, other, conv_of, after, "conv", "a conv kernel holds one convolution",
        "a conv kernel's epilogue computes pointwise ops element by element (a reduction, norm or pool after the "
        "convolution reads its whole output)"))
    return grower.untaken(pointwise_groups), grower.formed


def conv_op_reason(node: fx.Node) -> str | None:
    """Why a convolution is no direct conv kernel (None when it can be one by itself): why recognise refuses it,
    or why the kernel is not expected to pay, with or without an epilogue."""
    conv = epilogue_anchor(node)
    if isinstance(conv, str):
        return conv
    with_epilogue = slower_than_cudnn(node, conv, "epilogue")
    if with_epilogue:
        return with_epilogue
    alone = slower_than_cudnn(node, conv, "")
    if alone:
        return f"the pointwise ops after it went into another kernel, and alone {alone}"
    return None
