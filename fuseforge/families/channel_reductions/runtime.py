"""Fixed C++ of the channel-reduction kernels: amin/amax/sum/mean over axis 1 with prologue and epilogue, one launch.

Each channel-reduction group is a generated `Op` struct (`kernel.py`) that the
template below calls:

    kFull, kOut, kPool                // full-shape inputs ([N, C, S] contiguous), outputs ([N, S] contiguous),
                                      //   whether a pool computes the first value of the prologue
    const float* full[kFull];
    float* out[kOut];
    static float init()               // the accumulator's start value (inf, -inf, 0)
    static float combine(a, b)        // two partial results into one (NaN-propagating min/max, sum)
    float reduced(in, c, pool)        // prologue: the value reduced, from the inputs of one element of channel c
                                      //   (and its pooled value)
    void element(acc, channels, at, o)  // the reduced value from the accumulator, then the epilogue: the
                                      //   outputs of position `at` = n * S + s
    with a pool (kPool): const float* pooled;  the pool's input [N, C, *in_size] contiguous
    FFPoolWindow window(d, s)         // the window of pooled position s: start per axis, average divisor
    float pool(plane, d, w)           // the pooled value of window w over one (n, c) plane of the pool's input
A *pool kernel* (a pool with the pointwise ops after it, no reduction) has instead of init/combine/element:
    void pooled_element(in, c, pool, o)  // the outputs of one pooled element (n, c, s), [N, C, S] contiguous

Layout: the input is [N, C, S] with S the product of the spatial sizes; output position (n, s) reduces
the C values at n * C * S + c * channel_step + s * position_step: (S, 1) for contiguous inputs, (1, C) for
channels-last ones (NHWC: a convolution that ran channels-last; taken as it is when it is the kernel's one
full input, made contiguous otherwise). The pool's input likewise. A channels-last full input runs
`ff_cred_nhwc_kernel`: each warp reads 32 channels of a position at a time (coalesced) into shared memory.
Otherwise one thread per output position (four consecutive positions with 16-byte loads and stores when
S % 4 == 0 and every pointer is 16-byte aligned, one otherwise); a 256-thread block covers 256 (or 1024)
consecutive positions of one sample, so each warp's loads of one channel are contiguous (coalesced); each
thread loads 4 channels before it combines them, so 4 loads per thread are in flight. Each thread combines
its channels in order (both kernels): deterministic, no atomics.
With a pool, each thread computes its window once (start per axis, divisor) and then the pooled value of
each channel from the window of that channel's plane (scalar loads: windows are strided). A pool kernel
runs one thread per pooled element (grid-stride loop over N * C * S).
Indices are 64-bit; the binding checks the grid fits (N * blocks per sample < 2^31) and C < 2^31.
"""

from ...cuda_sources import cuda_source

CHANNEL_REDUCE_TYPES = cuda_source(__package__, "types.cuh")

CHANNEL_REDUCE_KERNEL_RUNTIME = cuda_source(__package__, "reduce.cu")

CHANNEL_REDUCE_BINDING_RUNTIME = cuda_source(__package__, "binding.h")
