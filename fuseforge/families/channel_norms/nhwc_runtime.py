"""Fixed C++ of the channel kernels over a channels-last input (NHWC): statistics, finalise, normalise.

A convolution that runs channels-last (`fuseforge/layout.py`) hands a batch norm or group norm an input whose
channels are the fastest axis: value (n, c, s) at (n * S + s) * C + c. When that tensor is the group's one
full-shape input, the binding takes it as it is (`FFChanDims::nhwc`) and three launches replace the two of
`runtime.py`, with the same Op interface:

1. statistics: block (sample n, part of the positions, 32 channels): lane = channel, so each warp reads 32
   consecutive channels of one position (128 contiguous bytes); warp w takes positions w, w + 8, ... of
   the part, four in flight per step (Welford per four values, Chan's merge). The 8 warps' statistics of
   each channel are merged in warp order into the workspace, one (count, mean, M2) per (n, part, channel),
   of the values less the unit's pivot (`runtime.py`).
2. finalise: one warp per unit (a channel for batch norm; one sample's group of C / G channels for group
   norm) merges the unit's entries (lane k takes entries k, k + 32, ...; then a fixed shuffle tree), writes
   the mean (hi, lo) and 1 / sqrt(var + eps) to the workspace, and the per-unit results (running statistics) as
   `runtime.py` does.
3. normalise + epilogue: one block per tile of `cuda/tiles.cuh`'s `FFTiles` (up to 32 channels x 1024 / width
   positions of one sample; the transposing kernels' geometry). The input tile is read along channels
   into shared memory (16 bytes per load when C and positions are multiples of 4 and the data aligned),
   then each thread computes its quads along positions (four positions of one channel: one channel's
   statistics) and writes them to the NCHW outputs, 16 bytes per store: coalesced both ways. (Earlier
   tiles of 32 channels x 64 positions with 4-byte accesses took 212 us for conv2d_batchnorm_relu's
   [64, 64, 128, 128], where torch.compile's kernel takes 177 us and the transposing lab 185 us.)

Order: the statistics blocks run from the end of the tensor to its start and the normalise tiles from the
start to the end, so each pass begins on the data the previous one (the convolution, then the
statistics) touched last, which may still be in the L2 cache. Every order is fixed, no atomics: the
statistics are the same on every run.
"""

from ...cuda_sources import cuda_source

CHANNEL_NHWC_KERNEL_RUNTIME = cuda_source(__package__, "channel_nhwc.cu")
