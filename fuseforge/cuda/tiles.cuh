
// The transposing kernels' tiles over a [N, C, S] space (N == 1 for [C, S]). A tile is `width` channels
// (C rounded up to a power of two, at most 32) x `span` = 1024 / width positions of one sample, so with
// fewer than 32 channels it grows along positions instead of leaving lanes idle. A block of 128 threads
// moves one tile, eight elements per thread: two quads. With `quads` (C and S multiples of 4 and the data
// 16-byte aligned, decided by the host) a quad is one 16-byte access on either side: four consecutive
// channels of one position in channels-last memory, four consecutive positions of one channel in NCHW
// memory; otherwise the eight are single elements. Shared memory holds the tile as `width` channel rows of
// `span` + 4 positions: a row stays 16-byte aligned and the pad moves the rows' banks apart. The kernels
// launch one block per tile. Where only C is a multiple of 4 (and the channels-last data aligned), `channel_quads`:
// the channels-last side still moves quads (four channels of one position, one 16-byte access), the NCHW side single
// elements; a spatial size that is no multiple of 4 (odd outputs of a convolution: 95 x 95, 127 x 127) is common.
// (Measured with dev/kernels/transpose_lab.cu on the H100: 16-byte accesses
// 2.3-2.9 TB/s against 1.5-1.9 TB/s scalar; two quads per thread and one tile per block 2.86-2.91 TB/s on
// [64, 32 or 64, 16384], one quad with 8 blocks per multiprocessor looping over tiles 2.69-2.74, a copy 2.88-2.96;
// on the H200 a persistent grid that loads its next tile while it stores this one ran 10-25 % slower than one tile
// per block. Blocks of 128 threads on tiles of 1024, the pointwise tiled kernels compiled for 16 of them a
// multiprocessor (FF_TILE_MIN_BLOCKS: 2048 threads, 32 registers), measured with dev/kernels/bench_tiles.py on the
// H200 against 256 threads on tiles of 2048 at 6 blocks: a GELU epilogue 0.778 -> 0.681 ms on [128, 128, 130, 130],
// 1.489 -> 1.348 on [128, 64, 256, 256], 0.099 -> 0.089 on [64, 32, 128, 128]; tanh(x + b) * 0.5 0.664 -> 0.621,
// 1.265 -> 1.172, 0.085 -> 0.077; ff_channels_last at 128 threads 0.550 -> 0.537, 1.071 -> 1.061, equal.)
// (an enum: units without a tiled kernel leave them unused, which a constexpr variable would warn about)
enum : int {
    FF_TILE_THREADS = 128, FF_TILE_ELEMENTS = 1024, FF_TILE_LOG_ELEMENTS = 10,
    FF_TILE_QUADS = FF_TILE_ELEMENTS / (4 * FF_TILE_THREADS),  // quads per thread
    FF_TILE_SLOTS = FF_TILE_ELEMENTS + 4 * 32,  // width * (span + 4) for width <= 32
    // The pointwise tiled kernels' blocks a multiprocessor (__launch_bounds__ of the quads path with 32-bit indices):
    // 16 (32 registers) for at most three inputs; a four-input kernel spilled 64 bytes there: 12 (40 registers).
    FF_TILE_MIN_BLOCKS = 16, FF_TILE_MIN_BLOCKS_MANY_INPUTS = 12,
};
// (Compiling the 256-thread kernels for 6 blocks per multiprocessor, 40 registers, measured no faster and spilled in
// convtranspose2d_bias_tanh_scale's 64-bit-index kernel; for 8, 32 registers, 7-9 % faster, less than the above.)
struct FFTiles {
    int64_t channels, positions, c_tiles, s_tiles, count;
    int log_width, log_span;
    bool quads;
    bool channel_quads;  // 16-byte accesses on the channels-last side (aligned, C % 4 == 0); implied by quads
    __host__ __device__ FFTiles(int64_t samples, int64_t C, int64_t S, bool aligned)
        : channels(C), positions(S) {
        log_width = 0;
        while (log_width < 5 && ((int64_t)1 << log_width) < C) ++log_width;
        log_span = FF_TILE_LOG_ELEMENTS - log_width;
        c_tiles = (C + (1 << log_width) - 1) >> log_width;
        s_tiles = (S + (1 << log_span) - 1) >> log_span;
        count = samples * c_tiles * s_tiles;
        channel_quads = aligned && C % 4 == 0;
        quads = channel_quads && S % 4 == 0;
    }
    // A [N, C, S] or [C, S] iteration space (constant indices: a runtime index into a kernel parameter
    // would copy it to local memory).
    __host__ __device__ static FFTiles of(const FFShape& shape, bool aligned) {
        const bool batched = shape.rank == 3;
        return FFTiles(batched ? shape.size[0] : 1, batched ? shape.size[1] : shape.size[0],
                       batched ? shape.size[2] : shape.size[1], aligned);
    }
    // One block per tile (the kernels loop over tiles all the same, for more than 2^31 - 1 of them).
    __host__ __device__ unsigned blocks() const { return (unsigned)(count < 0x7fffffff ? count : 0x7fffffff); }
    // Tile t: its sample, first channel and first position.
    __device__ __forceinline__ void origin(int64_t t, int64_t& n, int64_t& c0, int64_t& s0) const {
        s0 = (t % s_tiles) << log_span;
        c0 = (t / s_tiles % c_tiles) << log_width;
        n = t / s_tiles / c_tiles;
    }
    // Thread x's quads are items x + FF_TILE_THREADS j of the tile (j < FF_TILE_QUADS), its single elements items
    // x + FF_TILE_THREADS j (j < 4 * FF_TILE_QUADS). Quad k along channels (channels-last order): position p, channels
    // c .. c + 3; along positions (NCHW order): channel c, positions p .. p + 3. Element e likewise.
    __device__ __forceinline__ static int item(int j) { return j * FF_TILE_THREADS + (int)threadIdx.x; }
    __device__ __forceinline__ void quad_along_channels(int k, int& p, int& c) const {
        c = (k & ((1 << (log_width - 2)) - 1)) << 2;
        p = k >> (log_width - 2);
    }
    __device__ __forceinline__ void quad_along_positions(int k, int& p, int& c) const {
        p = (k & ((1 << (log_span - 2)) - 1)) << 2;
        c = k >> (log_span - 2);
    }
    __device__ __forceinline__ void element_along_channels(int e, int& p, int& c) const {
        c = e & ((1 << log_width) - 1);
        p = e >> log_width;
    }
    __device__ __forceinline__ void element_along_positions(int e, int& p, int& c) const {
        p = e & ((1 << log_span) - 1);
        c = e >> log_span;
    }
    __device__ __forceinline__ int pitch() const { return (1 << log_span) + 4; }
    __device__ __forceinline__ int slot(int p, int c) const { return c * pitch() + p; }

    // The fixed phases of the kernels that move a tile between global memory and `tile`, the block's
    // shared buffer ([channel][position], rows of pitch()). Each moves this thread's (threadIdx.x) items
    // of the tile at (n, c0, s0) of a [N, C, S] space, skipping those outside it; the kernels put
    // __syncthreads() between a tile's phases. Index arithmetic is in index_t, as the kernels' is.
    // Channels-last memory ([N, S, C]) -> tile, along channels: with quads or channel_quads four channels of one
    // position as one 16-byte load, else single elements, all loads issued before any is stored.
    template <typename index_t>
    __device__ __forceinline__ void load_channels_last(float* tile, const float* __restrict__ src, int64_t n,
                                                       int64_t c0, int64_t s0, index_t C, index_t S) const {
        load<true>(tile, src, n, c0, s0, C, S);
    }
    // NCHW memory ([N, C, S], contiguous) -> tile, along positions: with quads four positions of one channel
    // as one 16-byte load and one 16-byte shared-memory store, else single elements, all loads issued
    // before any is stored.
    template <typename index_t>
    __device__ __forceinline__ void load_nchw(float* tile, const float* __restrict__ src, int64_t n, int64_t c0,
                                              int64_t s0, index_t C, index_t S) const {
        load<false>(tile, src, n, c0, s0, C, S);
    }
    // Tile -> channels-last memory ([N, S, C]), along channels: with quads or channel_quads four channels of one
    // position as one 16-byte store, else single elements.
    template <typename index_t>
    __device__ __forceinline__ void store_channels_last(const float* tile, float* __restrict__ dst, int64_t n,
                                                        int64_t c0, int64_t s0, index_t C, index_t S) const {
        int p, ch;
        if (quads || channel_quads) {
#pragma unroll
            for (int j = 0; j < FF_TILE_QUADS; ++j) {
                quad_along_channels(item(j), p, ch);
                const index_t s = (index_t)(s0 + p), c = (index_t)(c0 + ch);
                if (s < S && c < C) {
                    const float* row = tile + slot(p, ch);
                    *reinterpret_cast<float4*>(address<true>(dst, n, c0, ch, s, C, S)) =
                        make_float4(row[0], row[pitch()], row[2 * pitch()], row[3 * pitch()]);
                }
            }
            return;
        }
#pragma unroll
        for (int j = 0; j < 4 * FF_TILE_QUADS; ++j) {
            element_along_channels(item(j), p, ch);
            const index_t s = (index_t)(s0 + p), c = (index_t)(c0 + ch);
            if (s < S && c < C) *address<true>(dst, n, c0, ch, s, C, S) = tile[slot(p, ch)];
        }
    }

  private:
    // Element (n, c0 + ch, s) of the [N, C, S] space in channels-last ([N, S, C]) or NCHW ([N, C, S]) memory
    // at `base`. (c0 and ch apart: in NCHW memory n * C + c0 is the same for a quad's four elements, and
    // ff_channels_last's scalar path measured 5-14% slower on the H100 with a 64-bit n * C per element.)
    template <bool kChannelsLast, typename T, typename index_t>
    __device__ __forceinline__ static T* address(T* base, int64_t n, int64_t c0, int ch, index_t s, index_t C,
                                                 index_t S) {
        if (kChannelsLast) return base + ((index_t)n * S + s) * C + (index_t)(c0 + ch);
        return base + ((index_t)n * C + (index_t)c0 + ch) * S + s;
    }
    // load_channels_last (kChannelsLast: quads also with channel_quads) and load_nchw.
    template <bool kChannelsLast, typename index_t>
    __device__ __forceinline__ void load(float* tile, const float* __restrict__ src, int64_t n, int64_t c0,
                                         int64_t s0, index_t C, index_t S) const {
        int p, ch;
        if (quads || (kChannelsLast && channel_quads)) {
            float4 q[FF_TILE_QUADS];
            int at[FF_TILE_QUADS];  // the quad's shared-memory slot, -1 outside the tensor
#pragma unroll
            for (int j = 0; j < FF_TILE_QUADS; ++j) {
                if (kChannelsLast) quad_along_channels(item(j), p, ch);
                else quad_along_positions(item(j), p, ch);
                const index_t s = (index_t)(s0 + p), c = (index_t)(c0 + ch);
                at[j] = s < S && c < C ? slot(p, ch) : -1;
                if (at[j] >= 0)
                    q[j] = __ldg(reinterpret_cast<const float4*>(address<kChannelsLast>(src, n, c0, ch, s, C, S)));
            }
#pragma unroll
            for (int j = 0; j < FF_TILE_QUADS; ++j) {
                if (at[j] < 0) continue;
                float* row = tile + at[j];
                if (kChannelsLast) {  // four channels: one element in each of four rows
                    row[0] = q[j].x; row[pitch()] = q[j].y; row[2 * pitch()] = q[j].z; row[3 * pitch()] = q[j].w;
                } else {  // four positions of one channel: one 16-byte shared-memory store
                    *reinterpret_cast<float4*>(row) = q[j];
                }
            }
            return;
        }
        float v[4 * FF_TILE_QUADS];
        int at[4 * FF_TILE_QUADS];  // the element's shared-memory slot, -1 outside the tensor
#pragma unroll
        for (int j = 0; j < 4 * FF_TILE_QUADS; ++j) {
            if (kChannelsLast) element_along_channels(item(j), p, ch);
            else element_along_positions(item(j), p, ch);
            const index_t s = (index_t)(s0 + p), c = (index_t)(c0 + ch);
            at[j] = s < S && c < C ? slot(p, ch) : -1;
            v[j] = at[j] >= 0 ? __ldg(address<kChannelsLast>(src, n, c0, ch, s, C, S)) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < 4 * FF_TILE_QUADS; ++j)
            if (at[j] >= 0) tile[at[j]] = v[j];
    }
};
