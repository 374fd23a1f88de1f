"""Fixed C++ of the channel kernels (train-mode batch norm, group norm): statistics, then normalise + epilogue.

Each channel group is a generated `Op` struct (`kernel.py`) that the templates below call:

    kFull, kOut, kEps, kMomentum, kKeep   // full-shape inputs and outputs; eps; momentum and 1 - momentum
    const float* full[kFull];             // the full-shape inputs, [N, C, HW] contiguous
    float* out[kOut];                     // the full-shape outputs, [N, C, HW] contiguous
    float reduced(in, c)                  // prologue: the value whose statistics are taken, from the inputs
                                          //   of one element of channel c
    void channel_values(norm, m2, count, u)  // batch norm's per-channel results (batch mean, inverse std,
                                          //   new running mean and variance): written once per unit u
    void element(in, norm, c, o)          // normalise + epilogue: the full-shape outputs of one element

Statistics are taken per *unit*: a channel for batch norm (every axis but axis 1), one sample's group of
C / G channels for group norm (contiguous in memory). Two launches per call, both on the caller's stream:
1. statistics: each (unit, part) block computes Welford statistics (count, mean, M2) of its share of
   the channel, of the values less the unit's pivot (the mean of 32 values spread over the unit: where the values
   lie far from zero next to their spread, a convolution's bias larger than its outputs' spread, the updates then
   round at the spread's scale; 0 where that mean is within a quarter of the samples' range of zero, so that a
   mean near zero, a batch norm of normalised values, keeps its precision), and writes them to a workspace
   [units][parts][3]: per thread, Welford per value (scalar path) or per four values with Chan's merge
   (vectorised path); across threads, Chan's merge by warp shuffles and shared memory in a fixed order.
   Columns ([N, C]: few rows a thread) sum in double instead, and units of at most 256 values (a warp each) take
   their statistics in double in one launch. No atomics: the result is the same on every run.
2. apply: every thread merges its channel's partials in part order (the same order in every block, so
   every block sees bit-identical statistics), finalises mean (pivot + the partials' mean, as two floats
   hi + lo: the normalise's (v - hi) - lo rounds once) and 1/sqrt(biased var + eps), and one
   thread per channel writes the per-channel results (running statistics: momentum * batch value +
   (1 - momentum) * old, with the unbiased variance M2 / (count - 1), as PyTorch); then the outputs.

Layouts: planes (HW > 1, and every group norm): batch norm's channel c is N contiguous planes of HW values
at (n * C + c) * HW, a group norm unit is C / G * HW contiguous values; one block of 256 threads per
(unit, part); 16-byte loads and stores when HW % 4 == 0 and every full-shape
pointer is aligned (four values never straddle a plane), scalar otherwise. Columns (HW == 1, BatchNorm1d
on [N, C]): 32 consecutive channels x 8 row lanes per block, so each warp reads 128 contiguous bytes.
Small units (at most 256 values, planes only: group norm over [N, C] with a few channels per group): one launch, a
warp per unit, each lane keeping its 8 values in registers from the statistics (merged by warp shuffles in a
fixed order) to the outputs.
Channels-last input (its one full-shape input; `FFChanDims::nhwc`): three launches instead, in
`nhwc_runtime.py`. Indices within a channel are 32-bit (the binding checks a channel holds fewer than 2^31 values).
"""

from ...cuda_sources import cuda_source, paste_include

CHANNEL_TYPES = cuda_source(__package__, "types.cuh")

CHANNEL_KERNEL_RUNTIME = paste_include(cuda_source(__package__, "channel.cu"), "welford.cuh")

CHANNEL_BINDING_RUNTIME = cuda_source(__package__, "binding.h")
