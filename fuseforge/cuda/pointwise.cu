
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
            if constexpr (sizeof(index_t) == 4) {  // magic divisors: 8-13 % off a flat bias + GELU on an H200
                const uint32_t q = ff_div32((uint32_t)i, shape.magic[d], shape.shift[d]);
                offset += (int64_t)((uint32_t)i - q * (uint32_t)size) * op.stride[d];
                i = (index_t)q;
            } else {
                offset += (int64_t)(i % size) * op.stride[d];
                i /= size;
            }
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

#include "tiles.cuh"
const char* ff_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }
