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
CONV_FLOPS = 100e12  # cuDNN convolutions (TF32 by default in PyTorch): a rough effective rate (cudnn_conv_rate
# prices the not transposed 2-D and 3-D ones by their measurements, 2-D at most this)
BANDWIDTH = 2.98e12  # device copy, bytes read + written per second
LAUNCH_S = 3e-6  # per kernel launch, as seen from a stream of small ops
# cuBLAS's fp32 matrix product with 2 to 16 output columns (out[M, N] = A[M, K] @ B[K, N] with a large A) reads A at
# about three quarters of the copy rate: 2.12-2.22 TB/s on a 1 GB A for N = 2..16 and 0.66-0.79 of a plain read of A
# on 67-268 MB, where N = 1 (a matrix-vector kernel) reads at the copy rate (dev/kernels/bench_thin_mm.py,
# bench/results/2026-11-27i_gpu/thin_mm.json: H100, torch 2.11)
THIN_PRODUCT_BANDWIDTH = 2.2e12
THIN_PRODUCT_COLUMNS = range(2, 17)
# Host time of one op of a generated forward (Python, dispatch, launch): its 22 ops (views, two mm, a linear,
# five kernels, ...) took 445 us to enqueue on the H100 machine (dev/kernels/host_overhead.py on
# conv2d_avgpool_bias_logsumexp, bench/results/2026-11-22_rows_trailing_channels_h100/run4_host/). Where a forward's
# GPU work is short, the benchmark times this (`cost.Timeline`: a forward's calls issued at this rate, each one's
# GPU work run once it is issued and the work before it done).
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
# In 3-D its rate grows with the window (15.2 and 16.5 TFLOP/s at 3x3x3, 20.4 at 4x4x4): a time per output element
# (the store, the tile's set-up) plus the products, fitted to the 24 and 27 shapes (their tiles' tails counted as
# work, as `families/conv/price.direct_seconds` counts them) and within 7 % on 48's: 5.5 ps an output + FLOPs at 35
# TFLOP/s. The 2-D shapes measured all have 144 products an output, so CONV_DIRECT_FLOPS[2] alone prices them.
CONV_DIRECT_3D = (5.5e-12, 35e12)  # (seconds per output element, FLOP/s)
# The shifted-descriptor tensor-core kernel (families/conv/shift.cuh, 3xTF32) summing its values over the spatial axes
# (nothing stored), measured in its lab on an H200 (bench/results/2026-11-29e_gpu, run 3: 8 -> 64 channels, 3x3, at
# 128, 256 and 384 columns): 65.4, 58.1 and 55.6 TFLOP/s of convolution, its dropped positions not counted; with them
# counted as work (as `families/conv/price.direct_seconds` does) 66-67.
CONV_SHIFT_SUM_FLOPS = 60e12
# cuDNN (eager's F.conv2d/conv3d, NCHW, PyTorch's default flags) took 16.1-17.1 TFLOP/s in 2-D and 6.6-11.7 in 3-D
# with the bias, which PyTorch adds in a pass of its own (a read and a write of the output); without that pass,
# 23.1-25.0 in 2-D and 6.9-14.5 in 3-D (each time less the output's round trip at BANDWIDTH).
CUDNN_SHORT_DOT_FLOPS = {2: 24.0e12, 3: 10.0e12}
# Eager's convolution with its bias (nn.Conv2d's own call: cuDNN, then PyTorch's bias pass), where cuDNN runs it in
# exact fp32 (eager's precision class, measured on the GPU before planning), is priced in 2-D at the rate measured
# with the bias: 16.1-17.1 TFLOP/s at 8 -> 64 channels, 3x3 (conv_direct.json, cudnn_conv: 57/73/85's, 67/87's and
# 65's shapes, all exact-fp32); the no-bias rate alone priced those calls 1.40-1.47x fast. Where cuDNN runs a short
# dot product in TF32 (8 -> 128 channels, 3x3: 1.673 ms with the bias, 23 TFLOP/s, run4.json) or the class is not
# measured, CUDNN_SHORT_DOT_FLOPS stays. In 3-D the rates measured with the bias (6.6-11.7) spread with the window
# more than the bias pass moves them, and the no-bias rate stays.
CUDNN_SHORT_DOT_WITH_BIAS_FLOPS = {2: 16.6e12}
SHORT_DOT_CHANNELS, SHORT_DOT_TERMS = 8, 192  # the range those measurements cover
# The TF32 implicit-GEMM conv kernel of families/conv (igemm.cuh) reads, per output tile, an input box and a weight
# tile from L2 for every tap and 32-channel block; its time is that traffic at a rate fitted to the H100 (the
# instance the plan picks, bench/results/2026-11-27c_h100/conv_igemm5.json and profile_kernels.json): in 2-D
# 5.1e12 bytes/s (17, 32, 52, conv2d_batchnorm_relu, conv2d_channelmin_tanh within 0.95-1.1x), in 3-D 7.3e12 (43);
# scaled by the speed-up its channel-by-channel epilogue (6ce0d21) measured on an H200 (same SMs and clocks; the
# kernel is not DRAM-bound): 1.19-1.29x on the four 2-D convolutions of bench/results/2026-11-29c_gpu, 1.03-1.17x in 3-D.
# It is a fit, not the bound: cuDNN's channels-last kernel with the same 128x128x32 tile ran 17's convolution in
# 0.875 ms where this one took 2.10 (profile_kernels.json), so L2 traffic alone does not limit it.
IGEMM_L2_BYTES_PER_S = {2: 6.2e12, 3: 8.0e12}
# Its 3xTF32 form (fp32-class convolutions) does three tensor-core products for each one, a fresh accumulator a k-tile
# waited for before it is added: priced, beside twice the L2 traffic, at this rate of its products (three per
# multiply-add counted). An assumption: half of TF32_FLOPS (the GEMM family's 3xTF32 kernel reached 3 x 135.8 TFLOP/s
# of products, near all of it, without this kernel's wait a k-tile). On an H200 (bench/results/2026-11-28i_gpu, run 4,
# the persistent kernel, one block of 4 stages or 3 at 128 channels) the traffic price with 32-channel chunks came out
# at 0.76-1.5x of the kernels' measured times (78 1.18x, 43 0.80x, 52 0.76x, 100 1.50x); with 8-channel chunks (87's
# 8 -> 64 channel 3x3 convolution) its loads ran at IGEMM_SPLIT_CHUNK8_L2_BYTES_PER_S (3.74 ms: each 32-byte box row a
# TMA request of its own), and the input copy, whose 32 x 32 tiles then hold 8 channels, at IGEMM_NARROW_COPY_BYTES_PER_S
# (0.73 ms for 268 MB read and 537 MB written).
IGEMM_SPLIT_FLOPS = 0.5 * TF32_FLOPS
IGEMM_SPLIT_CHUNK8_L2_BYTES_PER_S = 1.94e12
IGEMM_NARROW_COPY_BYTES_PER_S = 1.1e12
# Its transposed convolutions of stride > 1 (a block per output parity class's tile, each storing every s-th output of
# a row: half-written sectors that only L2 merges) store their output at an effective rate that limits them: measured
# on an H100 (bench/results/2026-11-28c_gpu, 78f20bb; the whole model's time, the tail fused, over the output's bytes):
# tiles of 32-pixel rows 0.57 (16) and 0.75 TB/s (20), tiles of 16-pixel rows 0.39 (93) and 0.455 (100). Keyed by the
# tile's row width; narrower rows priced as 16.
IGEMM_PARITY_STORE_BYTES_PER_S = {32: 0.57e12, 16: 0.39e12}


def is_short_dot(channels: int, terms: int) -> bool:
    """A convolution whose dot products are short: few input channels (per group) times a small window."""
    return channels <= SHORT_DOT_CHANNELS and terms <= SHORT_DOT_TERMS


# cuDNN's convolutions past that range (TF32-class: eager's F.conv2d/conv3d, NCHW, stride 1, PyTorch's default
# flags, with the bias pass), measured on an H100 at the problem models' shapes (bench/results/2026-11-27b_h100/
# conv_igemm/run4.json, ms.cudnn_conv), take about the same time per output element whatever their input channels:
# 10.8-11.2 ps in 2-D at 16, 32 and 64 channels with a 3x3 window (14.0 at 64 -> 64 channels), 13.3-16.9 ps in 3-D
# at 8, 32 and 64 channels with a 3x3x3 window. Their rate is the FLOPs of an output element over that time (26
# TFLOP/s at 16 channels x 3x3), the convolution itself (less the bias pass) up to a ceiling, CUDNN_TF32_FLOPS:
# with the bias, the 64-channel 2-D ones ran 83-105 TFLOP/s, the 64-channel 3-D ones 234 (3x3x3) and 211 (5x5x5). The synthetic sweep agrees in 2-D at 64 output channels
# (bench/results/2026-11-27_h100/conv_sweep.json: 10.4-11.1 ps at 12-32 input channels x 3x3, 12.0-15.7 ps past the
# short-dot range with 5x5 and 7x7 windows); with 16 output channels cuDNN was slower (16-24 ps), with 128 output and
# 16 input channels faster (6.8 ps).
CUDNN_OUTPUT_S = {2: 11e-12, 3: 15e-12}  # seconds per output element, the bias pass included
# without the bias pass, the 64-channel 3x3 ones ran 146 TFLOP/s (bench/results/2026-11-27c_h100/conv_times.json); in
# 3-D the ceiling is between the 64-channel 3x3x3 (300) and 5x5x5 (211) convolutions' rates
CUDNN_TF32_FLOPS = {2: 146e12, 3: 260e12}
# per output element, PyTorch's bias pass (a read and a write; 3.3-3.5 ps with vs without the bias in both layouts,
# bench/results/2026-11-27c_h100/conv_times.json): none without a bias
BIAS_PASS_S = 3.4e-12
# In 3-D the short-dot rate grows with the input channels: CUDNN_SHORT_DOT_FLOPS[3] is that of the 3-channel shapes
# it was measured on; with 4 channels (a 3x3x3 window, TF32-class, run4.json) cuDNN ran 13.7 TFLOP/s with the bias,
# about 4/3 of it, and with 8 channels x 3x3x3 (216 products, just past the range) 24.6-32.6 (conv_sweep.json, run4.json).
SHORT_DOT_MEASURED_CHANNELS = 3


def cudnn_conv_rate(channels: int, terms: int, dims: int, bias: bool = True, exact_fp32: bool = False) -> float:
    """cuDNN's rate on a (not transposed) NCHW convolution with `channels` input channels per group and `terms`
    products per output, `dims` spatial axes, with or without a bias (that the cost model counts as one FLOP per
    output): short dot products at their measured rate (in 2-D with a bias, where cuDNN was measured to run it in
    exact fp32, the rate measured with the bias pass), longer ones at CUDNN_OUTPUT_S per output element less the
    bias pass, or CUDNN_TF32_FLOPS where that is longer, plus the bias pass where there is a bias."""
    if dims not in CUDNN_SHORT_DOT_FLOPS:
        return CONV_FLOPS
    if is_short_dot(channels, terms):
        if dims == 3:
            return CUDNN_SHORT_DOT_FLOPS[3] * max(1.0, channels / SHORT_DOT_MEASURED_CHANNELS)
        return CUDNN_SHORT_DOT_WITH_BIAS_FLOPS[dims] if bias and exact_fp32 else CUDNN_SHORT_DOT_FLOPS[dims]
    floor = CUDNN_OUTPUT_S[dims] - BIAS_PASS_S  # the convolution itself, a time per output
    per_output = max(floor, 2.0 * terms / CUDNN_TF32_FLOPS[dims]) + (BIAS_PASS_S if bias else 0.0)
    return (2.0 * terms + (1 if bias else 0)) / per_output


# cuDNN's channels-last convolutions and its transposed ones, TF32-class (PyTorch's default flags), measured on an
# H100 at every convolution of the problem models without a bias (bench/results/2026-11-27c_h100/conv_times.json,
# ms_channels_last_no_bias and ms_nchw_no_bias): each takes about max(outputs x a floor, FLOPs / a rate) in its
# layout, (floor seconds per output element, FLOP/s):
# - channels-last convolutions, 2-D: 3.3-4.1 ps per output at 16-64 input channels (3x3), the 64-channel ones
#   282-326 TFLOP/s; 3-D: 6.7-8.4 ps (206 TFLOP/s at 32 x 3x3x3). About half of NCHW's time (7.2-7.9 ps).
# - transposed ones with stride 1 (the window slides over every input), NCHW 104-133 TFLOP/s in 2-D and 82-113 in
#   3-D, channels-last 211-288 and 103-118; with a larger stride, the floor: 5.6-7.1 ps NCHW, 2.5-3.1 channels-last.
#   A strided transposed convolution is s^d convolutions of the output's parities, each at most the convolution
#   rate of its layout.
# Not covered (the price is then 2-3x low): transposed convolutions with at most 8 input channels (13 ps NCHW in
# 3-D, 9.4-9.6 channels-last) or 16 output channels (2-D: 16.5 ps NCHW, 10.9 channels-last).
CUDNN_CHANNELS_LAST = {2: (3.4e-12, 300e12), 3: (6.7e-12, 210e12)}
CUDNN_TRANSPOSED = {("nchw", 2): (6.3e-12, 110e12), ("nchw", 3): (6.0e-12, 95e12),
                    ("channels_last", 2): (3.0e-12, 250e12), ("channels_last", 3): (2.7e-12, 110e12)}


# PyTorch's train-mode batch norm of an NCHW/NCDHW input (cuDNN's bn_fw_tr_1C11_kernel_NCHW, one kernel): it reads the
# input for the statistics, then reads it again and writes the output, one block per channel, so with fewer channels
# than SMs part of the GPU idles. Measured on an H100: 555.6 us for [64, 64, 128, 128] (268 MB, 64 channels;
# bench/results/2026-11-22_profile_h100_7c08f5e/kernels_nograd.json, conv2d_batchnorm_relu): 3 x 268 MB in that time
# is 1.45 TB/s, 0.49 of BANDWIDTH, where 64 channels occupy 64 / 132 = 0.48 of the SMs.
BATCH_NORM_TRAIN_PASSES = 3


def batch_norm_train_seconds(input_bytes: int, units: int) -> float:
    """Eager's train-mode batch norm (and the norms PyTorch runs the same way, `cost.statistics_units`):
    BATCH_NORM_TRAIN_PASSES passes over the input at the bandwidth of the SMs its units (channels) occupy, one block
    each."""
    return BATCH_NORM_TRAIN_PASSES * input_bytes / (BANDWIDTH * min(1.0, units / SMS))


def cudnn_conv_seconds(outputs: int, flops: float, channels: int, terms: int, dims: int, *,
                       channels_last: bool = False, transposed: bool = False, strided: bool = False,
                       bias: bool = False, exact_fp32: bool = False) -> float:
    """cuDNN's time on a convolution of `outputs` output elements and `flops` (two per product), `channels` input
    channels per group and `terms` products per output, in NCHW or channels-last, transposed or not (`strided`:
    stride > 1 on some axis), with PyTorch's bias pass where there is a `bias`. 1-D and other convolutions: at
    CONV_FLOPS."""
    if dims not in (2, 3):
        return flops / CONV_FLOPS
    layout = "channels_last" if channels_last else "nchw"
    if transposed:
        floor, rate = CUDNN_TRANSPOSED[layout, dims]
        if strided:
            rate = CUDNN_CHANNELS_LAST[dims][1] if channels_last else CUDNN_TF32_FLOPS[dims]
    elif channels_last:
        floor, rate = CUDNN_CHANNELS_LAST[dims]
    else:
        return flops / cudnn_conv_rate(channels, terms, dims, bias, exact_fp32)
    return max(outputs * floor, flops / rate) + (outputs * BIAS_PASS_S if bias else 0.0)
