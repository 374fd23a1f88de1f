"""What a conv group's kernel is expected to take, and whether that beats cuDNN: the direct kernel at its measured
rate, the implicit-GEMM kernel by its tiles' L2 traffic (3xTF32: twice the bytes, three products for one), cuDNN at
its time measured on the GPU before planning where it was (else the rates' price), and the passes over the
convolution's output that a group's tail saves. `group.py` keeps a group where `slower_than_cudnn` finds no reason."""

from __future__ import annotations

import math

from torch import fx

from ... import cost, rates
from ...traced import size_hint, tensor_meta, traced_shape
from . import tiling
from .anchor import ConvAnchor
from .parity import parity_launches

CUDNN_MEASURED = "ff_cudnn_measured"  # node meta: cuDNN's times on this convolution (a layout_precision.measured row)
# The tensor-core kernel replaces cuDNN only where it is priced at most this fraction of cuDNN's time plus what its
# tail saves: its price is an L2 rate fitted to its measured times within about 0.95-1.1x, so a closer call is a coin
# toss (2026-11-29: a bare 32 -> 64 channel convolution priced 0.385 ms against cuDNN's measured 0.387).
IGEMM_MARGIN = 0.9


def direct_seconds(node: fx.Node, conv: ConvAnchor) -> float:
    """The conv kernel's time (launch not included): the direct kernel at its measured rate, its tiles' tails
    counted as work; the implicit-GEMM kernel by the L2 traffic of its tiles (`igemm_seconds`)."""
    if conv.kernel == "igemm":
        return igemm_seconds(node, conv)
    out = traced_shape(node)
    if conv.kernel == "shift":  # its positions in whole bands of padded rows counted as work
        return 2.0 * conv.terms * cost.numel(node) / (rates.CONV_SHIFT_SUM_FLOPS * _shift_useful(node, conv))
    fraction = tiling.useful_fraction(conv.tiling, conv.k, out[-2], out[-1])
    flops = 2.0 * conv.terms * cost.numel(node)
    if conv.dims == 3:  # a time per output and the products (rates.CONV_DIRECT_3D)
        per_output, rate = rates.CONV_DIRECT_3D
        return cost.numel(node) * per_output + flops / (rate * fraction)
    return flops / (rates.CONV_DIRECT_FLOPS[conv.dims] * fraction)


def _shift_useful(node: fx.Node, conv: ConvAnchor) -> float:
    """The shifted-tap kernel's kept positions of those it computes (`tiling.shift_useful_fraction`)."""
    out = traced_shape(node)
    w_in = traced_shape(node.all_input_nodes[0])[-1]
    return tiling.shift_useful_fraction(out[-2], out[-1], w_in, conv.padding, conv.tiling.chunks)


def igemm_seconds(node: fx.Node, conv: ConvAnchor) -> float:
    """The implicit-GEMM kernel's time: every tile reads, per tap and chunk of channels, its input box and its
    weight tile from L2 (`rates.IGEMM_L2_BYTES_PER_S`, the rate fitted to its measured times; 3xTF32 reads both parts
    of both, and its tensor cores do three products for one: the slower of that traffic and
    `rates.IGEMM_SPLIT_FLOPS`; with 8-channel chunks at their own measured rate); the channels-last path first copies
    the input (a read and a write, 3xTF32 two; under 32 channels at the copy kernel's measured rate)."""
    t = conv.tiling
    out = traced_shape(node)
    bd, bh, bw = t.box
    batch = size_hint(tensor_meta(node).shape[0])
    a_box = (t.box_width * tiling.IGEMM_BK * bh * bd if t.nchw else t.bm * t.chunk) * 4
    b_tile = t.bn * t.chunk * 4 / t.cluster  # a cluster's blocks read a weight tile from L2 once
    halves = 2 if t.split else 1
    seconds = 0.0
    for extents, taps in parity_launches(conv, (out[2] if conv.dims == 3 else 1, out[-2], out[-1])):
        tiles = (math.ceil(conv.k / t.bn) * math.ceil(extents[0] / bd) * math.ceil(extents[1] / bh)
                 * math.ceil(extents[2] / bw) * batch)
        chunks = taps * t.cq // t.chunk
        rate = rates.IGEMM_SPLIT_CHUNK8_L2_BYTES_PER_S if t.chunk == 8 else rates.IGEMM_L2_BYTES_PER_S[conv.dims]
        traffic = tiles * chunks * (a_box + b_tile) * halves / rate
        products = tiles * t.bm * t.bn * taps * t.cq * 2 * 3 / rates.IGEMM_SPLIT_FLOPS if t.split else 0.0
        seconds += max(traffic, products)
    if conv.transposed and conv.stride != (1, 1, 1):  # strided stores of its parity classes (a measured rate)
        seconds = max(seconds, cost.nbytes(node) / rates.IGEMM_PARITY_STORE_BYTES_PER_S[32 if bw >= 32 else 16])
    if not t.nchw:
        x_bytes = 4 * batch * t.cp * math.prod(size_hint(s) for s in tensor_meta(node.all_input_nodes[0]).shape[2:])
        copy_rate = rates.IGEMM_NARROW_COPY_BYTES_PER_S if t.cp < tiling.IGEMM_BK else rates.BANDWIDTH
        seconds += (1 + halves) * x_bytes / copy_rate + rates.LAUNCH_S
    return seconds


def cudnn_seconds(node: fx.Node, conv: ConvAnchor) -> tuple[float, str]:
    """cuDNN's time on the convolution (without the bias the plan's graph does not give it) and how its layout is said:
    NCHW or, for a TF32-class one the layout step may run channels-last, the faster of the two (the input's conversion
    included); as measured on the GPU before planning where it was (`mark_measured`, "measured"), else the rates'
    price."""
    bias = cost.conv_has_bias(node)
    tf32 = conv.kernel == "igemm" and not conv.tiling.split  # a TF32-class convolution (3xTF32: an fp32-class one)
    row = node.meta.get(CUDNN_MEASURED)
    if row is not None:
        options = [(cost.measured_conv_seconds(row, bias), " (measured)")]
        if tf32 and row.get("channels_last_in_class") and "ms_channels_last" in row:
            options.append((cost.measured_conv_seconds(row, bias, channels_last=True)
                            + row.get("ms_to_channels_last", 0.0) / 1e3, " channels-last (measured)"))
        return min(options)
    cudnn, layout = cost.conv_seconds(node), ""
    if tf32:  # TF32-class: the layout step may run cuDNN channels-last instead, in class
        channels_last = cost.channels_last_conv_seconds(node)
        cudnn, layout = min(cudnn, channels_last), " channels-last" if channels_last < cudnn else ""
    return cudnn, layout


# What a group's tail saves beside cuDNN's convolution: passes over the convolution's output, and how it is said.
SAVED = {"": (0, ""), "epilogue": (2, " and the pass its epilogue saves"),
          "reduction": (1, " and the read of its output that reducing it takes"),
          "norm": (1, " and the statistics pass over its output that its norm's kernels would take")}


def slower_than_cudnn(node: fx.Node, conv: ConvAnchor, tail: str) -> str | None:
    """Why the group is not expected faster than cuDNN's convolution (as the cost model prices it: NCHW, or for a
    TF32-class one channels-last with its operands' conversion where that is faster) plus the passes over the
    convolution's output that its `tail` saves (`SAVED`): an epilogue, the pass of the kernel after cuDNN that would
    read it back; a spatial sum or channel reduction, the read of the kernel that would reduce it; a channel norm, the
    read of its statistics pass -- the kernel's own time is priced with its stores, as if it wrote the output, and no
    less than its input and output's pass over memory (the floor the plan's estimate puts under a conv kernel)."""
    ours = max(direct_seconds(node, conv), (cost.nbytes(node.all_input_nodes[0]) + cost.nbytes(node)) / rates.BANDWIDTH)
    passes, said = SAVED[tail]
    saved = passes * cost.nbytes(node) / rates.BANDWIDTH
    cudnn, layout = cudnn_seconds(node, conv)
    theirs = cudnn + saved
    if ours < (IGEMM_MARGIN if conv.kernel == "igemm" else 1.0) * theirs:
        return None
    out = traced_shape(node)
    if conv.kernel == "igemm":
        extents = parity_launches(conv, (out[2] if conv.dims == 3 else 1, out[-2], out[-1]))[0][0]
        useful = tiling.igemm_useful_fraction(conv.tiling, conv.k, extents)
        kernel = "the tensor-core kernel"
    elif conv.kernel == "shift":
        useful = _shift_useful(node, conv)
        kernel = "the tensor-core spatial-sum kernel"
    else:
        useful = tiling.useful_fraction(conv.tiling, conv.k, out[-2], out[-1])
        kernel = "the direct kernel"
    close = (f", less by under the {1 - IGEMM_MARGIN:.0%} its price may err" if ours < theirs else "")
    return (f"{kernel} is expected to take {ours * 1e3:.3f} ms, {useful:.0%} of its tiles' work real output, "
            f"against {theirs * 1e3:.3f} ms for cuDNN{layout}"
            f"{said}{close}: cuDNN stays")
