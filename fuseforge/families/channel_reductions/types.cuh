
// Channel reductions: the sizes of one call, shared by kernel and binding.
struct FFCredDims {
    int64_t batch, channels, positions;  // the input as [N, C, S]; the output as [N, S]
    int64_t tiles;                       // blocks per sample
    // with a pool: F = [N, C, *out_size] is the pooled shape, the pool's input [N, C, *in_size]
    int64_t in_positions;                // product of in_size
    int64_t in_size[3], out_size[3];     // per spatial axis (as many as the pool has)
    int64_t channel_step, position_step; // element (n, c, s) of a full input: n * C * S + c * channel_step +
                                         //   s * position_step; (S, 1) contiguous, (1, C) channels-last
    int64_t pool_nhwc;                   // 1: the pool's input is channels-last, 0: contiguous
};
constexpr int kFFCredThreads = 256;
