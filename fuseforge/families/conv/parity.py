"""A transposed convolution as the implicit-GEMM kernel computes it: per axis, the outputs o = s q + r of a transposed
convolution of window k, stride s, padding p take the taps t0, t0 + s, .. (t0 = (r + p) mod s) at inputs q + e - j, so
each output parity class (r per axis) is an ordinary stride-1 convolution with the class's taps in reverse and a
padding of its own (igemm.cuh's `axis_class` and `launch_transposed`, which this mirrors for planning and pricing)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

MAX_PARITY_CLASSES = 8  # igemm.cuh's kMaxParities: the output parity classes one launch of the kernel computes


@dataclass(frozen=True)
class AxisClass:
    """One axis of one output parity class r of a transposed convolution (igemm.cuh's `axis_class`): the outputs
    o = s q + r take the taps t0, t0 + s, .. (`taps` of them) at inputs q + e - j: a stride-1 convolution of
    `taps` taps with padding `pad` over `extent` outputs q."""

    t0: int
    taps: int
    pad: int
    extent: int


def axis_class(k: int, s: int, p: int, out: int, r: int) -> AxisClass:
    t0 = (r + p) % s
    taps = -(-(k - t0) // s) if t0 < k else 0
    return AxisClass(t0, taps, taps - 1 - (r + p - t0) // s, -(-(out - r) // s) if out > r else 0)


def _classes(window, stride, padding, extents) -> list[list[AxisClass]]:
    """Every output parity class (rd, rh, rw), in the kernel's class order, as its three axes."""
    return [[axis_class(window[a], stride[a], padding[a], extents[a], r) for a, r in enumerate(rs)]
            for rs in itertools.product(*(range(s) for s in stride))]


def parity_launches(conv, extents: tuple[int, int, int]) -> list[tuple[tuple[int, int, int], int]]:
    """The implicit-GEMM kernel's launches for a convolution `conv` (a ConvAnchor) of output extents (OD, OH, OW):
    (its output extents, its taps) each; one for an ordinary convolution, one per non-empty output parity class for
    a transposed one."""
    if not conv.transposed:
        return [(extents, conv.window[0] * conv.window[1] * conv.window[2])]
    return [(tuple(a.extent for a in axes), math.prod(a.taps for a in axes))
            for axes in _classes(conv.window, conv.stride, conv.padding, extents) if all(a.extent > 0 for a in axes)]


def class_tap_counts(window, stride, padding) -> tuple[int, ...]:
    """The taps of each output parity class of a transposed convolution (of an ordinary one: its window's taps)."""
    return tuple(math.prod(a.taps for a in axes) for axes in _classes(window, stride, padding, (1, 1, 1)))


def transposed_reason(window, stride, padding, dilation) -> str | None:
    """Why the implicit-GEMM kernel's output parity classes cannot compute a transposed convolution (None when they
    can): every class needs a tap on every axis (window >= stride), and the taps of a class are s apart only
    without dilation."""
    if dilation != (1, 1, 1):
        return "a dilated transposed convolution (the conv kernels take transposed ones without dilation)"
    if any(k < s for k, s in zip(window, stride)):
        return "a transposed convolution whose stride is larger than its window (outputs that no tap reaches)"
    if math.prod(stride) > MAX_PARITY_CLASSES:
        return (f"a transposed convolution of {math.prod(stride)} output parity classes (stride "
                f"{'x'.join(map(str, stride))}; the kernel's launch holds at most {MAX_PARITY_CLASSES})")
    return None
