
// ---- ff_channels_last: [N, C, S] contiguous -> [N, S, C] (channels-last), tile transpose per sample (FFTiles).
// Read along positions, write along channels. kQuads is tiles.quads: one kernel per path, so that each gets
// the registers its own path needs (with both paths in one kernel the scalar path's 64-bit addresses took
// 118 registers, two blocks per multiprocessor).
template <bool kQuads>
__global__ void __launch_bounds__(FF_TILE_THREADS) ff_channels_last_kernel(const float* __restrict__ in,
                                                                        float* __restrict__ out, FFTiles tiles) {
    __shared__ __align__(16) float tile[FF_TILE_SLOTS];  // [channel][position], rows of tiles.pitch()
    const int64_t C = tiles.channels, S = tiles.positions;
    tiles.quads = kQuads;  // a constant for the phases' branches
    for (int64_t t = blockIdx.x; t < tiles.count; t += gridDim.x) {
        int64_t n, c0, s0;
        tiles.origin(t, n, c0, s0);
        tiles.load_nchw(tile, in, n, c0, s0, C, S);
        __syncthreads();
        tiles.store_channels_last(tile, out, n, c0, s0, C, S);
        __syncthreads();
    }
}

int launch_ff_channels_last(const float* in, float* out, int64_t batch, int64_t channels, int64_t positions,
                            void* stream) {
    const bool aligned = reinterpret_cast<uintptr_t>(in) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
    const FFTiles tiles(batch, channels, positions, aligned);
    if (tiles.count == 0) return 0;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (tiles.quads) ff_channels_last_kernel<true><<<tiles.blocks(), FF_TILE_THREADS, 0, s>>>(in, out, tiles);
    else ff_channels_last_kernel<false><<<tiles.blocks(), FF_TILE_THREADS, 0, s>>>(in, out, tiles);
    return (int)cudaGetLastError();
}
