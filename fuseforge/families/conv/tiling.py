"""How the direct convolution kernel (`direct.cuh`) tiles one convolution: a rule of the convolution's channels,
window and output extents, never of a model.

A thread holds KPT = 8 output channels x PH output rows of one output column (lanes along W, 32 columns a tile);
a block is WK x WH warps, at most 8 (256 threads, two blocks per SM): WK warps across the output channels
(BK = 8 * WK channels a block, as many as the convolution has, up to 64), WH warps down the rows. PH is 8 where
the registers allow (the kernel keeps PH x KPT accumulators, KH x KPT weights and PH + KH - 1 input values), and
the tile is no taller than the output needs. The block's shared memory holds the channel group's weights and two
input tiles with their halo; where they take more than half an SM's shared memory the tile gets fewer rows of
warps, and where one row of warps still does not fit the convolution has no tiling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

KPT = 8  # output channels per thread (two float4 weight loads)
TILE_W = 32  # output columns per tile: one per lane
MAX_WARPS = 8  # 256 threads: two blocks per SM at up to 128 registers a thread
MAX_BLOCK_K = 64
SMEM_LIMIT = 113 * 1024  # half an H100 SM's 227 KB of shared memory: two blocks per SM
# Registers a thread's arrays may take (accumulators, weights, input values); the kernel's other ~30 registers
# come on top. Measured with ptxas (sm_90a): 98 here -> 127 registers, 0 spills (8 channels x 8 rows, 3x3).
REGISTER_BUDGET = 100


@dataclass(frozen=True)
class Tiling:
    kpt: int
    wk: int  # warps across output channels
    wh: int  # warps down output rows
    ph: int  # output rows per thread

    @property
    def threads(self) -> int:
        return 32 * self.wk * self.wh

    @property
    def block_k(self) -> int:
        return self.wk * self.kpt

    @property
    def tile_h(self) -> int:
        return self.wh * self.ph


def _registers(ph: int, kh: int) -> int:
    return ph * KPT + kh * KPT + ph + kh - 1


def choose(c: int, k_out: int, window: tuple[int, int, int], stride: tuple[int, int, int],
           dilation: tuple[int, int, int], out_h: int) -> Tiling | str:
    """The tiling of a convolution of `c` -> `k_out` channels, window (KD, KH, KW), stride and dilation per axis
    (depth, rows, columns) and `out_h` output rows, or why the kernel has none."""
    kh = window[1]
    unit_rows = stride[1] == 1 and dilation[1] == 1  # the kernel's path that reuses each input row for KH outputs
    wk = min(MAX_WARPS, math.ceil(min(k_out, MAX_BLOCK_K) / KPT))
    wh = max(1, MAX_WARPS // wk)
    # 8 rows a thread only on the unit-row path over more than one (channel, depth) plane: ptxas (nvcc 13.0,
    # sm_90a) spilled 8 x 8 tiles of the strided-row path (C = 8, 3x3) and of a single plane (C = 1, 3x3) at the
    # 128-register cap (dev/kernels/conv_direct/sweep_conv_direct.py's build)
    ph = 8 if wh <= 2 and unit_rows and c * window[0] > 1 else 4
    while ph > 2 and _registers(ph, kh) > REGISTER_BUDGET:
        ph //= 2
    if _registers(ph, kh) > REGISTER_BUDGET:
        return f"a window {kh} rows tall needs more registers than a thread has ({_registers(ph, kh)} values)"
    while wh > 1 and (wh // 2) * ph >= out_h:  # no warps below the last output row
        wh //= 2
    while ph > 2 and (ph // 2) * wh >= out_h:
        ph //= 2
    t = Tiling(KPT, wk, wh, ph)
    while smem_bytes(t, c, window, stride, dilation) > SMEM_LIMIT and t.wh > 1:
        t = Tiling(KPT, wk, t.wh // 2, ph)  # shorter tiles: less input halo in shared memory
    if smem_bytes(t, c, window, stride, dilation) > SMEM_LIMIT:
        return "its weights and input tiles do not fit in half an SM's shared memory"
    return t


def smem_bytes(t: Tiling, c: int, window: tuple[int, int, int], stride: tuple[int, int, int],
               dilation: tuple[int, int, int]) -> int:
    """Shared memory of one block: the channel group's weights and two input tiles with their halo."""
    kd, kh, kw = window
    th_in = (t.tile_h - 1) * stride[1] + (kh - 1) * dilation[1] + 1
    tw_in = (TILE_W - 1) * stride[2] + (kw - 1) * dilation[2] + 1
    return 4 * (c * kd * kh * kw * t.block_k + 2 * c * kd * th_in * tw_in)


def useful_fraction(t: Tiling, k_out: int, out_h: int, out_w: int) -> float:
    """The share of the tiles' work that computes real outputs (the rest is channel, row and column tails)."""
    def share(n: int, tile: int) -> float:
        return n / (math.ceil(n / tile) * tile)
    return share(k_out, t.block_k) * share(out_h, t.tile_h) * share(out_w, TILE_W)
