"""Fixed C++ text shared by every generated extension: operand descriptors, loads, launch helpers.

`TYPES` is included by both translation units (kernels and torch binding), so it uses no CUDA or torch
header. `KERNEL_RUNTIME` goes into the kernel unit; `BINDING_RUNTIME` into the torch binding.

`ff_prepare` merges the dims of a call's iteration space and describes every operand over the merged
dims. It also picks the tiled path of the pointwise kernels (`FFCall::tiled`): when the merged space is
[N, C, S] or [C, S] and an operand is channels-last over it (strides [S*C, 1, C], or [1, C]; an NHWC or
NDHWC tensor of an NCHW-sized iteration), reading it in the output's order would be strided by C, so the
kernel reads the first such operand a tile at a time through shared memory (`FFTiles`) (`ff_offset_ncs`
addresses the other operands of a tile's element) and still writes contiguous outputs. Ranks above 3 stay
on the flat path.
"""

TYPES = r"""
#include <cstdint>
// How a kernel sees its iteration space and its operands (shared by kernels and binding).
constexpr int FF_MAX_RANK = 8;
struct FFShape {
    int rank;                    // dims after size-1 dims were dropped and mergeable dims merged
    int64_t size[FF_MAX_RANK];
    int64_t inner;               // size[rank - 1] (1 for rank 0): kernels never index the arrays by rank,
};                               // which would copy the descriptors to local memory
struct FFOperand {
    const float* ptr;
    int mode;                    // FF_DENSE: offset == index; FF_SCALAR: one value; FF_STRIDED: by strides
    int64_t stride[FF_MAX_RANK]; // element strides over FFShape's dims (0 where broadcast)
    int64_t inner_stride;        // stride[rank - 1] (0 for rank 0)
};
enum FFMode { FF_DENSE = 0, FF_SCALAR = 1, FF_STRIDED = 2 };
"""

TILES = r"""
// The transposing kernels' tiles over a [N, C, S] space (N == 1 for [C, S]). A tile is `width` channels
// (C rounded up to a power of two, at most 32) x `span` = 2048 / width positions of one sample, so with
// fewer than 32 channels it grows along positions instead of leaving lanes idle. A block of 256 threads
// moves one tile, eight elements per thread: two quads. With `quads` (C and S multiples of 4 and the data
// 16-byte aligned, decided by the host) a quad is one 16-byte access on either side: four consecutive
// channels of one position in channels-last memory, four consecutive positions of one channel in NCHW
// memory; otherwise the eight are single elements. Shared memory holds the tile as `width` channel rows of
// `span` + 4 positions: a row stays 16-byte aligned and the pad moves the rows' banks apart. The kernels
// launch one block per tile. (Measured with dev/kernels/transpose_lab.cu on the H100: 16-byte accesses
// 2.3-2.9 TB/s against 1.5-1.9 TB/s scalar; two quads per thread and one tile per block 2.86-2.91 TB/s on
// [64, 32 or 64, 16384], one quad with 8 blocks per multiprocessor looping over tiles 2.69-2.74, a copy 2.88-2.96.)
// (an enum: units without a tiled kernel leave them unused, which a constexpr variable would warn about)
enum : int {
    FF_TILE_THREADS = 256, FF_TILE_ELEMENTS = 2048, FF_TILE_LOG_ELEMENTS = 11,
    FF_TILE_QUADS = FF_TILE_ELEMENTS / (4 * FF_TILE_THREADS),  // quads per thread
    FF_TILE_SLOTS = FF_TILE_ELEMENTS + 4 * 32,  // width * (span + 4) for width <= 32
};
// (Compiling them for 6 blocks per multiprocessor, 40 registers, measured no faster and spilled in
// convtranspose2d_bias_tanh_scale's 64-bit-index kernel.)
struct FFTiles {
    int64_t channels, positions, c_tiles, s_tiles, count;
    int log_width, log_span;
    bool quads;
    __host__ __device__ FFTiles(int64_t samples, int64_t C, int64_t S, bool aligned)
        : channels(C), positions(S) {
        log_width = 0;
        while (log_width < 5 && ((int64_t)1 << log_width) < C) ++log_width;
        log_span = FF_TILE_LOG_ELEMENTS - log_width;
        c_tiles = (C + (1 << log_width) - 1) >> log_width;
        s_tiles = (S + (1 << log_span) - 1) >> log_span;
        count = samples * c_tiles * s_tiles;
        quads = aligned && C % 4 == 0 && S % 4 == 0;
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
    // Thread x's quads are items x + 256 j of the tile (j < FF_TILE_QUADS), its single elements items
    // x + 256 j (j < 4 * FF_TILE_QUADS). Quad k along channels (channels-last order): position p, channels
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
    // Channels-last memory ([N, S, C]) -> tile, along channels: with quads four channels of one position as
    // one 16-byte load, else single elements, all loads issued before any is stored.
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
    // Tile -> channels-last memory ([N, S, C]), along channels: with quads four channels of one position as
    // one 16-byte store, else single elements.
    template <typename index_t>
    __device__ __forceinline__ void store_channels_last(const float* tile, float* __restrict__ dst, int64_t n,
                                                        int64_t c0, int64_t s0, index_t C, index_t S) const {
        int p, ch;
        if (quads) {
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
    // load_channels_last (kChannelsLast) and load_nchw.
    template <bool kChannelsLast, typename index_t>
    __device__ __forceinline__ void load(float* tile, const float* __restrict__ src, int64_t n, int64_t c0,
                                         int64_t s0, index_t C, index_t S) const {
        int p, ch;
        if (quads) {
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
"""

KERNEL_RUNTIME = r"""
// Offset of element `i` of the iteration space within an operand.
template <typename index_t>
__device__ __forceinline__ int64_t ff_offset(const FFShape& shape, const FFOperand& op, index_t i) {
    if (op.mode == FF_DENSE) return (int64_t)i;
    if (op.mode == FF_SCALAR) return 0;
    int64_t offset = 0;
#pragma unroll
    for (int d = FF_MAX_RANK - 1; d >= 0; --d) {
        if (d < shape.rank) {
            const index_t size = (index_t)shape.size[d];
            offset += (int64_t)(i % size) * op.stride[d];
            i /= size;
        }
    }
    return offset;
}

template <typename index_t>
__device__ __forceinline__ float ff_load(const FFShape& shape, const FFOperand& op, index_t i) {
    return __ldg(op.ptr + ff_offset(shape, op, i));
}

// Offset of element i = (n * C + c) * S + s of a [N, C, S] (rank 3) or [C, S] (rank 2, n == 0) iteration
// space within an operand, from its coordinates: no division per element (the tiled kernels).
template <typename index_t>
__device__ __forceinline__ int64_t ff_offset_ncs(const FFShape& shape, const FFOperand& op, index_t i,
                                                 index_t n, index_t c, index_t s) {
    if (op.mode == FF_DENSE) return (int64_t)i;
    if (op.mode == FF_SCALAR) return 0;
    if (shape.rank == 3) return (int64_t)n * op.stride[0] + (int64_t)c * op.stride[1] + (int64_t)s * op.stride[2];
    return (int64_t)c * op.stride[0] + (int64_t)s * op.stride[1];
}

template <typename index_t>
__device__ __forceinline__ float ff_load_ncs(const FFShape& shape, const FFOperand& op, index_t i,
                                             index_t n, index_t c, index_t s) {
    return __ldg(op.ptr + ff_offset_ncs(shape, op, i, n, c, s));
}

// A tiled kernel's quad: positions s .. s + 3 of one channel (S % 4 == 0, so they share n and c), element i
// first. One offset, then steps along positions (1 when dense, 0 for a scalar); 4-byte loads, since with a
// tiled operand only that one is known to be 16-byte aligned.
template <typename index_t>
__device__ __forceinline__ void ff_load4_ncs(const FFShape& shape, const FFOperand& op, index_t i, index_t n,
                                             index_t c, index_t s, float v[4]) {
    const int64_t at = ff_offset_ncs(shape, op, i, n, c, s);
    const int64_t step = op.mode == FF_DENSE ? 1 : op.mode == FF_SCALAR ? 0 : op.inner_stride;
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = __ldg(op.ptr + at + j * step);
}

// Four consecutive elements starting at `i` (a multiple of 4): one 16-byte load when dense; one offset
// computation, not four, when strided and the four share their outer indices.
template <typename index_t>
__device__ __forceinline__ void ff_load4(const FFShape& shape, const FFOperand& op, index_t i, float v[4]) {
    if (op.mode == FF_DENSE) {
        const float4 q = __ldg(reinterpret_cast<const float4*>(op.ptr + i));
        v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
        return;
    }
    if (op.mode == FF_SCALAR || shape.inner % 4 == 0) {  // i, i + 1, i + 2, i + 3 in one innermost row
        const int64_t at = ff_offset(shape, op, i);
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = __ldg(op.ptr + at + j * op.inner_stride);
    } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = ff_load(shape, op, (index_t)(i + j));
    }
}

__device__ __forceinline__ void ff_store4(float* out, int64_t i, const float v[4]) {
    *reinterpret_cast<float4*>(out + i) = make_float4(v[0], v[1], v[2], v[3]);
}

// Enough blocks to fill every multiprocessor several times; the kernels loop over the rest.
inline int ff_blocks(int64_t work, int threads) {
    static int sm_count[64] = {0};
    int device = 0;
    cudaGetDevice(&device);
    if (device < 64 && sm_count[device] == 0)
        cudaDeviceGetAttribute(&sm_count[device], cudaDevAttrMultiProcessorCount, device);
    const int64_t cap = (int64_t)(device < 64 && sm_count[device] > 0 ? sm_count[device] : 132) * 8;
    const int64_t wanted = (work + threads - 1) / threads;
    return (int)(wanted < 1 ? 1 : (wanted < cap ? wanted : cap));
}

""" + TILES + r"""
const char* ff_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }
"""

BINDING_RUNTIME = r"""
// The iteration space of a call: broadcast shape of the inputs, with dims merged where possible.
struct FFCall {
    FFShape shape;
    std::vector<FFOperand> operands;
    std::vector<int64_t> out_sizes;  // broadcast shape, as torch sees it
    int64_t numel;
    bool vectorizable;               // 16-byte loads and stores are safe (of the tiled operand when tiled)
    int tiled;                       // operand read through shared-memory tiles (channels-last), or -1
};

const char* ff_error_string(int code);

static FFCall ff_prepare(const char* kernel, const std::vector<torch::Tensor>& inputs) {
    FFCall call;
    std::vector<int64_t> sizes;
    for (size_t k = 0; k < inputs.size(); ++k) {
        const auto& t = inputs[k];
        TORCH_CHECK(t.is_cuda(), kernel, ": inputs must be CUDA tensors");
        TORCH_CHECK(t.scalar_type() == torch::kFloat, kernel, ": inputs must be float32, got ", t.scalar_type());
        TORCH_CHECK(t.device() == inputs[0].device(), kernel, ": inputs must be on one device");
        sizes = k == 0 ? t.sizes().vec() : at::infer_size(sizes, t.sizes());
    }
    call.out_sizes = sizes;
    call.numel = 1;
    for (auto s : sizes) call.numel *= s;
    // Expanded strides of every operand; dims of size 1 carry no information and are dropped.
    std::vector<std::vector<int64_t>> strides;
    for (const auto& t : inputs) strides.push_back(t.expand(sizes).strides().vec());
    std::vector<int64_t> dims;
    std::vector<std::vector<int64_t>> dim_strides(inputs.size());
    for (size_t d = 0; d < sizes.size(); ++d) {
        if (sizes[d] == 1) continue;
        bool merge = !dims.empty();
        for (size_t k = 0; merge && k < inputs.size(); ++k)
            merge = dim_strides[k].back() == strides[k][d] * sizes[d];
        if (merge) {
            dims.back() *= sizes[d];
            for (size_t k = 0; k < inputs.size(); ++k) dim_strides[k].back() = strides[k][d];
        } else {
            dims.push_back(sizes[d]);
            for (size_t k = 0; k < inputs.size(); ++k) dim_strides[k].push_back(strides[k][d]);
        }
    }
    TORCH_CHECK((int)dims.size() <= FF_MAX_RANK, kernel, ": more than ", FF_MAX_RANK, " non-mergeable dims");
    call.shape.rank = (int)dims.size();
    for (size_t d = 0; d < dims.size(); ++d) call.shape.size[d] = dims[d];
    call.shape.inner = dims.empty() ? 1 : dims.back();
    call.vectorizable = call.numel % 4 == 0;
    for (size_t k = 0; k < inputs.size(); ++k) {
        FFOperand op;
        op.ptr = inputs[k].data_ptr<float>();
        bool dense = true, scalar = true;
        int64_t expected = 1;
        for (int d = call.shape.rank - 1; d >= 0; --d) {
            op.stride[d] = dim_strides[k][d];
            dense = dense && op.stride[d] == expected;
            scalar = scalar && op.stride[d] == 0;
            expected *= dims[d];
        }
        op.inner_stride = dims.empty() ? 0 : op.stride[call.shape.rank - 1];
        op.mode = scalar ? FF_SCALAR : (dense ? FF_DENSE : FF_STRIDED);
        if (op.mode == FF_DENSE && reinterpret_cast<uintptr_t>(op.ptr) % 16 != 0) call.vectorizable = false;
        call.operands.push_back(op);
    }
    // Tiled: the merged space is [N, C, S] or [C, S] and an operand is channels-last over it (strides
    // [S*C, 1, C] or [1, C]): the first such operand is read a tile at a time (FFTiles), coalesced.
    call.tiled = -1;
    const int r = call.shape.rank;
    for (size_t k = 0; call.tiled < 0 && (r == 2 || r == 3) && k < inputs.size(); ++k) {
        const int64_t* st = call.operands[k].stride;
        const int64_t channels = dims[r - 2], positions = dims[r - 1];
        if (st[r - 2] == 1 && st[r - 1] == channels && channels > 1 && positions > 1 &&
            (r == 2 || st[0] == channels * positions))
            call.tiled = (int)k;
    }
    // The tiled kernel reads only the tiled operand 16 bytes at a time (FFTiles::quads adds C % 4 == 0 and
    // S % 4 == 0); its outputs are new tensors, so aligned.
    if (call.tiled >= 0)
        call.vectorizable = reinterpret_cast<uintptr_t>(call.operands[call.tiled].ptr) % 16 == 0;
    return call;
}

static void ff_check(const char* kernel, int code) {
    TORCH_CHECK(code == 0, kernel, ": CUDA error: ", ff_error_string(code));
}
"""
