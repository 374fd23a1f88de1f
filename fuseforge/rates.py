"""Rates measured on an H100, on which the cost model and the partitioner's choices rest.

Each number names its measurement. The GEMM kernels' time is not FLOPs over a rate alone: a grid of
128 x 128 tiles runs in whole waves over the SMs, and cuBLAS splits K where a grid would leave SMs idle,
so a product with few output tiles and a long K is cuBLAS's to keep.
"""

from __future__ import annotations

import math

SMS = 132  # H100 SXM
SGEMM_FLOPS = 51.3e12  # cuBLAS fp32 GEMM, measured on an H100
# our 3xTF32 GEMM, variant 2 (TMA loads, six splitter warps), TN 1024x8192x8192 on an H100
# (bench/results/2026-11-22_gemm_tma_h100_118831e/run05_ws_sweep_f749123.json)
GEMM3X_FLOPS = 135.8e12
# cuBLAS TF32 in the same run: the tensor cores' rate for fp32 inputs, a ceiling no fp32 GEMM passes
TF32_FLOPS = 415.3e12
GEMM3X_TILE = 128  # output tile side of every variant (M and N)
CONV_FLOPS = 100e12  # cuDNN convolutions (TF32 by default in PyTorch): a rough effective rate
BANDWIDTH = 2.98e12  # device copy, bytes read + written per second
LAUNCH_S = 3e-6  # per kernel launch, as seen from a stream of small ops
# Host time of one op of a generated forward (Python, dispatch, launch): its 22 ops (views, two mm, a linear,
# five kernels, ...) took 445 us to enqueue on the H100 machine (dev/kernels/host_overhead.py on
# conv2d_avgpool_bias_logsumexp, bench/results/2026-11-22_rows_trailing_channels_h100/run4_host/). Where a forward's
# GPU work is short, the benchmark times this.
HOST_OP_S = 20e-6

# The measurement above in waves: 1024x8192x8192 is 8 x 64 = 512 tiles, 4 waves over the SMs, in
# 2 * 1024 * 8192 * 8192 / GEMM3X_FLOPS seconds; so one tile of K = 8192 takes a quarter of that.
_HEADLINE_TILES, _HEADLINE_K = 8 * 64, 8192
_TILE_S_PER_K = 2.0 * 1024 * 8192 * 8192 / GEMM3X_FLOPS / math.ceil(_HEADLINE_TILES / SMS) / _HEADLINE_K


# A GEMM kernel replaces cuBLAS only when the model above expects it this much faster: it does not count a
# tile's fixed costs (pipeline fill, epilogue), and it missed a 4096x256x1024 linear (64 tiles, K = 1024) by
# about 2x: 0.047 ms expected, the model with it 0.078 ms slower than with cuBLAS (linear_chain_no_activation,
# bench/results/2026-11-22_suite_default_h100_73c86dd).
GEMM3X_MARGIN = 1.25


def gemm3x_seconds(batch: int, m: int, n: int, k: int, copies_b: bool = False) -> float:
    """Our GEMM kernel on [batch] x [m, k] x [k, n]: whole waves of tiles, each tile K steps long; with copies_b,
    plus the copy of an NN product's B ([K, N] rows) to the [N, K] rows the kernel reads (a read, a write, a
    launch)."""
    tiles = batch * math.ceil(m / GEMM3X_TILE) * math.ceil(n / GEMM3X_TILE)
    copy = 2.0 * 4 * batch * n * k / BANDWIDTH + LAUNCH_S if copies_b else 0.0
    return math.ceil(tiles / SMS) * k * _TILE_S_PER_K + copy


def sgemm_seconds(batch: int, m: int, n: int, k: int) -> float:
    """cuBLAS SGEMM at its measured rate (it splits K when the output has few tiles)."""
    return 2.0 * batch * m * n * k / SGEMM_FLOPS

# Convolutions with short dot products (at most SHORT_DOT_CHANNELS input channels, at most SHORT_DOT_TERMS products
# per output), measured on an
# H100 at the models' own sizes (bench/results/2026-11-27_h100/conv_direct.json: 3 and 8 channels, windows 3x3,
# 3x3x3 and 4x4x4, 16-64 output channels), by the number of spatial axes:
# the direct fp32 kernel of families/conv (direct.cuh) ran 23.5-26.0 TFLOP/s in 2-D and 15.2-20.4 in 3-D;
CONV_DIRECT_FLOPS = {2: 23.0e12, 3: 15.0e12}
# cuDNN (eager's F.conv2d/conv3d, NCHW, PyTorch's default flags) took 16.1-17.1 TFLOP/s in 2-D and 6.6-11.7 in 3-D
# with the bias, which PyTorch adds in a pass of its own (a read and a write of the output); without that pass,
# 23.1-25.0 in 2-D and 6.9-14.5 in 3-D (each time less the output's round trip at BANDWIDTH).
CUDNN_SHORT_DOT_FLOPS = {2: 24.0e12, 3: 10.0e12}
SHORT_DOT_CHANNELS, SHORT_DOT_TERMS = 8, 192  # the range those measurements cover


def is_short_dot(channels: int, terms: int) -> bool:
    """A convolution whose dot products are short: few input channels (per group) times a small window."""
    return channels <= SHORT_DOT_CHANNELS and terms <= SHORT_DOT_TERMS


def cudnn_conv_rate(channels: int, terms: int, dims: int) -> float:
    """cuDNN's rate on a (not transposed) convolution with `channels` input channels per group and `terms`
    products per output, `dims` spatial axes."""
    if dims in CUDNN_SHORT_DOT_FLOPS and is_short_dot(channels, terms):
        return CUDNN_SHORT_DOT_FLOPS[dims]
    return CONV_FLOPS
