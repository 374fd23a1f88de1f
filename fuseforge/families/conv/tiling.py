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

import dataclasses
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
               dilation: tuple[int, int, int], channel_reduce: bool = False) -> int:
    """Shared memory of one block: the channel group's weights and two input tiles with their halo (and, for a
    reduction over the channels, a partial per thread and row: direct.cuh's `Config::smem_bytes`)."""
    kd, kh, kw = window
    th_in = (t.tile_h - 1) * stride[1] + (kh - 1) * dilation[1] + 1
    tw_in = (TILE_W - 1) * stride[2] + (kw - 1) * dilation[2] + 1
    partials = t.wk * t.wh * t.ph * 32 if channel_reduce else 0
    return 4 * (c * kd * kh * kw * t.block_k + 2 * c * kd * th_in * tw_in + partials)


def useful_fraction(t: Tiling, k_out: int, out_h: int, out_w: int) -> float:
    """The share of the tiles' work that computes real outputs (the rest is channel, row and column tails)."""
    def share(n: int, tile: int) -> float:
        return n / (math.ceil(n / tile) * tile)
    return share(k_out, t.block_k) * share(out_h, t.tile_h) * share(out_w, TILE_W)


# ---------------------------------------------------------------------------------------------------------------
# The TF32 implicit-GEMM kernel (`igemm.cuh`): a tile is 128 output pixels (a bd x bh x bw box of one image) by
# BN output channels. Its instance per convolution, a rule of the convolution's extents and channels:
# - BN 128 where the convolution has 128 or more output channels, else 64;
# - BN 128: the NCHW path (the model's input read directly, no channels-last copy) for 2-D convolutions whose tiles
#   are rows of 32 pixels and whose input rows are whole 16-byte units (W a multiple of 4), the channels-last path
#   elsewhere (4-5x faster than NCHW on 3-D outputs 34-36 wide, 8-column tiles); 4 stages, one block an SM, a
#   persistent launch (a block a run of tiles, the next tile's loads under this one's epilogue);
# - BN 64: the channels-last path, 3 stages, two blocks an SM (one block's epilogue under the other's products).
# Fitted on the H100 lab (bench/results/2026-11-27b_h100/conv_igemm/run4.json, six instances on 14 shapes), then
# refitted after the epilogue went channel by channel (6ce0d21), on an H200 (bench/results/2026-11-29d_gpu, run 1):
# persistent from 8 % faster to 1 % slower than a block a tile at BN 128 (17's, 52's, 61's and 77's convolutions, run 1
# and run 2); channels-last 3 x 2 4-21 % faster than the former rule at BN 64 (43's 3-D convolution, and 16 -> 64
# channels in 2-D, which the NCHW path had).
IGEMM_BM = 128
IGEMM_BK = 32  # input channels per k-tile
NCHW_BOX_WIDTH = {32: 40, 16: 24, 8: 12}  # the NCHW A box's width per tile width (>= bw + 3, = 8 mod 16 where it fits)


@dataclass(frozen=True)
class IgemmTiling:
    nchw: bool  # the NCHW path (else the channels-last copy first)
    bn: int  # output channels per tile (64 or 128)
    stages: int
    min_blocks: int
    box: tuple[int, int, int]  # (bd, bh, bw) output pixels of a tile
    cp: int  # channels of the channels-last copy (C rounded up to 4; to 8 with 8-channel chunks)
    cq: int  # channels per tap of the re-laid weight (C rounded up to the chunk)
    split: bool = False  # 3xTF32: each operand as a TF32 big part and a small part, fp32-class products
    chunk: int = IGEMM_BK  # channels a chunk: 32 (128-byte rows), or 8 (32-byte rows) for few input channels
    chunks: int = 1  # chunks (taps x channel blocks) a k-tile
    persistent: bool = False  # a block a run of tiles, its ring running on from one tile to the next (else one tile)
    # lab instances (bench_split.py), not the rule: on an H200 neither was faster (bench/results/2026-11-29b_gpu)
    bm: int = IGEMM_BM  # output pixels a tile: 128, or 256 (TF32, channels-last path: two wgmmas a warpgroup and k8 step)
    cluster: int = 1  # blocks a cluster (TF32, channels-last path, a block a tile): 2 share each weight tile's L2 read

    def __post_init__(self):
        need = igemm_smem_bytes(self)
        if need > SMEM_PER_SM:
            raise ValueError(f"conv tiling {self.bn} x {self.bm}: {self.stages} stages of {igemm_slot_bytes(self)} "
                             f"bytes need {need} bytes of shared memory, more than an SM's {SMEM_PER_SM}")

    @property
    def precision(self) -> str:
        """What the tensor cores run: "3xTF32" (fp32-class) or "TF32"."""
        return "3xTF32" if self.split else "TF32"

    @property
    def box_width(self) -> int:
        """Width of the NCHW path's input box (0 on the channels-last path)."""
        return NCHW_BOX_WIDTH[self.box[2]] if self.nchw else 0

    @property
    def name(self) -> str:
        chunks = f", {self.chunks} x {self.chunk}-channel chunks a k-tile" if self.chunk != IGEMM_BK else ""
        return (f"{self.precision}, {'nchw' if self.nchw else 'channels-last'}, {self.bn} channels x {self.bm} pixels "
                f"a tile{chunks}")


SMEM_PER_SM = 232448  # bytes of shared memory an SM gives its blocks (227 KB on sm_90)
NCHW_A_BYTES = 24576  # the NCHW path's A box at its largest: 24 x 32 x 8 floats


def igemm_slot_bytes(t: IgemmTiling) -> int:
    """Bytes of one stage of the kernel's ring (igemm.cuh's Slot): the A boxes and B tiles of a k-tile's chunks, twice
    for 3xTF32 (big and small parts)."""
    a = NCHW_A_BYTES if t.nchw else t.chunks * t.bm * t.chunk * 4
    return (a + t.chunks * t.bn * t.chunk * 4) * (2 if t.split else 1)


def igemm_smem_bytes(t: IgemmTiling, stages: int | None = None) -> int:
    """Shared memory a block of the instance takes (at `stages` stages where given): its ring, a barrier pair a stage,
    the ring's 1024-byte alignment and the norm statistics' per-channel sums (2 doubles a channel of the tile), as the
    launch asks for them."""
    return (t.stages if stages is None else stages) * (igemm_slot_bytes(t) + 16) + 1024 + 16 * t.bn


def stages_that_fit(t: IgemmTiling, most: int, blocks: int = 1) -> int:
    """The most stages, at most `most`, with which `blocks` blocks of the instance fit an SM's shared memory."""
    return min(most, (SMEM_PER_SM // blocks - igemm_smem_bytes(t, 0)) // (igemm_slot_bytes(t) + 16))


def at_pixels(t: IgemmTiling, bm: int, out: tuple[int, int, int], cluster: int = 1) -> IgemmTiling:
    """The TF32 instance `t` on the channels-last path with tiles of `bm` pixels (128 or 256) over an output of extents
    `out`, in clusters of `cluster` blocks, launched a block a tile (as measured; a cluster needs it): as many of t's
    stages as fit an SM, and two blocks an SM only where two rings fit."""
    one = dataclasses.replace(t, stages=2, min_blocks=1, nchw=False, bm=bm, box=pixel_box(*out, bm=bm),
                              cluster=cluster, persistent=False)
    stages = stages_that_fit(one, t.stages)
    fits_two = stages_that_fit(one, stages, blocks=2) == stages
    return dataclasses.replace(one, stages=stages, min_blocks=t.min_blocks if fits_two else 1)


def pixel_box(od: int, oh: int, ow: int, bm: int = IGEMM_BM) -> tuple[int, int, int]:
    """The box (bd, bh, bw) of `bm` pixels (128 or 256) that covers the output with the fewest pixels computed and
    thrown away (ties: the widest rows, for longer stores)."""
    best = None
    for bw in (32, 16, 8):
        for bh in (bm // bw, bm // 2 // bw, bm // 4 // bw, bm // 8 // bw):
            if bh < 1:
                continue
            bd = bm // (bw * bh)
            if bd > 1 and od == 1:
                continue
            covered = -(-ow // bw) * bw * -(-oh // bh) * bh * -(-od // bd) * bd
            if best is None or covered < best[0]:
                best = (covered, (bd, bh, bw))
    return best[1]


def choose_igemm(dims: int, c: int, k_out: int, w_in: int, out: tuple[int, int, int],
                 bn: int | None = None) -> IgemmTiling:
    """The implicit-GEMM kernel's TF32 instance for a stride-1 convolution of `c` -> `k_out` channels, input width
    `w_in` and output extents `out` = (OD, OH, OW) (OD = 1 in 2-D); `bn` output channels a tile where given (a
    reduction over the channels needs one tile of them all), else the rule's."""
    box = pixel_box(*out)
    bn = bn or (128 if k_out >= 128 else 64)
    cp, cq = -(-c // 4) * 4, -(-c // IGEMM_BK) * IGEMM_BK
    if bn == 64:
        return IgemmTiling(False, bn, 3, 2, box, cp, cq)
    nchw = dims == 2 and box[2] == 32 and w_in % 4 == 0
    return IgemmTiling(nchw, bn, 4, 1, box, cp, cq, persistent=True)


def igemm_useful_fraction(t: IgemmTiling, k_out: int, out: tuple[int, int, int]) -> float:
    """The share of the tiles' pixels x channels that are real outputs."""
    def share(n: int, tile: int) -> float:
        return n / (math.ceil(n / tile) * tile)
    bd, bh, bw = t.box
    return share(k_out, t.bn) * share(out[0], bd) * share(out[1], bh) * share(out[2], bw)


# The 3xTF32 instance (fp32-class convolutions): the channels-last path (the copy holds both parts of the input) and a
# slot holding both halves of both operands. Chunks of 8 channels below 32 input channels (a k-tile of 32 channels
# would be mostly zeros), as many taps a k-tile as divide every class's chunks, at most 4 (32 channels of k a k-tile,
# as the 32-channel chunks). The launch is persistent (a block computes a run of tiles, the next tile's loads
# overlapping this one's products and stores), one block an SM with as many stages as fit (at most 4): on an H200
# (bench/results/2026-11-28i_gpu, run 4) that was the fastest instance on 87, 78 and 43's convolutions, before two
# blocks of 2-3 stages each (3-7 % slower) and epilogues staged through shared memory (0-16 % slower).
SPLIT_SMALL_CHUNK_BELOW = 32


def choose_split_igemm(c: int, k_out: int, out: tuple[int, int, int], tap_counts: tuple[int, ...],
                       bn: int | None = None) -> IgemmTiling:
    """The 3xTF32 instance for a stride-1 convolution of `c` -> `k_out` channels whose launch computes classes of
    `tap_counts` taps each (one class: the window's taps), output extents `out` (the largest class's); `bn` as
    `choose_igemm`'s."""
    box = pixel_box(*out)
    bn = bn or (128 if k_out >= 128 else 64)
    chunk = 8 if c < SPLIT_SMALL_CHUNK_BELOW else IGEMM_BK
    cq = -(-c // chunk) * chunk
    chunks = 1
    if chunk == 8:
        blocks = [taps * cq // chunk for taps in tap_counts]
        chunks = max(d for d in (1, 2, 3, 4) if all(b % d == 0 for b in blocks))
    t = IgemmTiling(False, bn, 1, 1, box, -(-c // 8) * 8 if chunk == 8 else -(-c // 4) * 4, cq,
                    split=True, chunk=chunk, chunks=chunks, persistent=True)
    return dataclasses.replace(t, stages=stages_that_fit(t, 4))


# ---- the shifted-descriptor tensor-core kernel (`shift.cuh`): its spatial-sum form
SHIFT_MAX_CHANNELS = 16  # two k8 steps a tap
SHIFT_MAX_TAPS = 9  # a 3x3 window or smaller: at 25 taps ptxas spilled its variants (dev/kernels/conv_wgmma_shift)
SHIFT_CHUNK = 128  # output positions a wgmma's N covers
SHIFT_BLOCKS_BY_REGISTERS = 2  # 172-181 registers a thread (ptxas, sm_90a): at most two 128-thread blocks an SM


@dataclass(frozen=True)
class ShiftTiling:
    """The shifted-descriptor kernel's band: `chunks` x 128 consecutive output positions (in the padded rows' order)
    of one sample, and how many blocks of its shared memory an SM holds."""

    chunks: int
    blocks: int

    @property
    def name(self) -> str:
        return f"bands of {self.chunks} x {SHIFT_CHUNK} positions, {self.blocks} block(s) per SM"


def shift_smem_bytes(c: int, window: tuple[int, int, int], dilation: tuple[int, int, int], w_in: int,
                     padding: tuple[int, int, int], chunks: int) -> int:
    """`shift.cuh`'s smem_bytes: the weights' big and small [64][8] tiles per tap and k8 step, two band buffers of both
    parts of every 4-channel plane, 1 KB of alignment."""
    steps = math.ceil(c / 8)
    kh, kw = window[1], window[2]
    inputs = chunks * SHIFT_CHUNK + (kh - 1) * dilation[1] * (w_in + 2 * padding[2]) + (kw - 1) * dilation[2]
    pixels = math.ceil(inputs / 8) * 8
    return kh * kw * steps * 2 * 64 * 8 * 4 + 2 * 2 * (2 * steps) * pixels * 16 + 1024


def choose_shift(c: int, window: tuple[int, int, int], stride: tuple[int, int, int], dilation: tuple[int, int, int],
                 padding: tuple[int, int, int], dims: int, w_in: int) -> ShiftTiling | str:
    """The shifted-descriptor kernel's band for a convolution ending in a spatial sum, or why it takes none: 2-D,
    stride 1, at most 16 input channels and 9 taps. Of bands of 2 and 4 chunks, the one that keeps the most blocks an
    SM, then the longer (measured on an H200, bench/results/2026-11-29e_gpu run 3: 2 chunks at 128 padded columns,
    two blocks an SM, 0.287 ms against 0.350; 4 chunks at 256 and 384 columns, one block either way, 1.309 and 3.098
    against 1.662 and 4.002)."""
    if dims != 2:
        return "the tensor-core spatial-sum kernel takes 2-D convolutions"
    if stride != (1, 1, 1):
        return "the tensor-core spatial-sum kernel takes stride 1 (a tap is a shift of one band)"
    if c > SHIFT_MAX_CHANNELS:
        return f"the tensor-core spatial-sum kernel takes at most {SHIFT_MAX_CHANNELS} input channels"
    if window[1] * window[2] > SHIFT_MAX_TAPS:
        return f"the tensor-core spatial-sum kernel takes windows of at most {SHIFT_MAX_TAPS} taps"
    fits = []
    for chunks in (2, 4):
        per_sm = min(SHIFT_BLOCKS_BY_REGISTERS,
                     SMEM_PER_SM // (shift_smem_bytes(c, window, dilation, w_in, padding, chunks) + 1024))
        if per_sm > 0:
            fits.append(ShiftTiling(chunks, per_sm))
    if not fits:
        return "the tensor-core spatial-sum kernel's band of a padded row this wide does not fit in shared memory"
    return max(fits, key=lambda t: (t.blocks, t.chunks))


def shift_useful_fraction(out_h: int, out_w: int, w_in: int, padding: tuple[int, int, int], chunks: int) -> float:
    """Of the positions the kernel computes per sample (whole bands of padded rows), the kept ones."""
    positions = out_h * (w_in + 2 * padding[2])
    band = chunks * SHIFT_CHUNK
    return out_h * out_w / (math.ceil(positions / band) * band)
