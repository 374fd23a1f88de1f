"""What a conv kernel computes: the convolution of a conv group, as the kernels and their price see it."""

from __future__ import annotations

from dataclasses import dataclass

from . import tiling


@dataclass(frozen=True)
class ConvAnchor:
    """What the convolution computes: y = conv(x, w) (+ bias per channel), 2-D or 3-D, as three axes each
    (a 2-D convolution is a 3-D one of depth 1)."""

    op: str
    x: str
    w: str
    bias: str | None
    dims: int  # 2 or 3
    c: int  # input channels
    k: int  # output channels
    window: tuple[int, int, int]  # (KD, KH, KW)
    stride: tuple[int, int, int]
    padding: tuple[int, int, int]
    dilation: tuple[int, int, int]
    tiling: tiling.Tiling | tiling.IgemmTiling | tiling.ShiftTiling  # the direct, implicit-GEMM or shifted kernel's
    transposed: bool = False  # a transposed convolution (weight [C, K, window]; the implicit-GEMM kernel's only)
    output_padding: tuple[int, int, int] = (0, 0, 0)  # a transposed convolution's extra output rows per axis

    @property
    def kernel(self) -> str:
        """"direct" (exact fp32 FFMAs), "igemm" (TF32 tensor cores) or "shift" (3xTF32 tensor cores, each tap a
        shifted descriptor: `shift.cuh`, a convolution ending in a spatial sum)."""
        if isinstance(self.tiling, tiling.IgemmTiling):
            return "igemm"
        return "shift" if isinstance(self.tiling, tiling.ShiftTiling) else "direct"

    @property
    def terms(self) -> int:
        return self.c * self.window[0] * self.window[1] * self.window[2]

    def geometry_text(self) -> str:
        axes = slice(3 - self.dims, 3)
        def fmt(t):
            return "x".join(str(v) for v in t[axes])
        extra = f", output padding {fmt(self.output_padding)}" if any(self.output_padding) else ""
        return (f"{'transposed, ' if self.transposed else ''}{self.c} -> {self.k} channels, window {fmt(self.window)}, "
                f"stride {fmt(self.stride)}, padding {fmt(self.padding)}, dilation {fmt(self.dilation)}{extra}")

    def out_extent(self, size: int, axis: int) -> int:
        """The output's extent along spatial axis `axis` (0 depth, 1 rows, 2 columns) for an input extent `size`."""
        k, s, p, d = self.window[axis], self.stride[axis], self.padding[axis], self.dilation[axis]
        if self.transposed:
            return (size - 1) * s - 2 * p + d * (k - 1) + self.output_padding[axis] + 1
        return (size + 2 * p - d * (k - 1) - 1) // s + 1
