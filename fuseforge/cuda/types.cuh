
#include <cstdint>
// How a kernel sees its iteration space and its operands (shared by kernels and binding).
constexpr int FF_MAX_RANK = 8;
struct FFShape {
    int rank;                    // dims after size-1 dims were dropped and mergeable dims merged
    int64_t size[FF_MAX_RANK];
    int64_t inner;               // size[rank - 1] (1 for rank 0): kernels never index the arrays by rank,
                                 // which would copy the descriptors to local memory
    uint32_t magic[FF_MAX_RANK]; // ff_div32's divisors of the 32-bit index path (ff_set_divisor)
    int shift[FF_MAX_RANK];
};
struct FFOperand {
    const float* ptr;
    int mode;                    // FF_DENSE: offset == index; FF_SCALAR: one value; FF_STRIDED: by strides
    int64_t stride[FF_MAX_RANK]; // element strides over FFShape's dims (0 where broadcast)
    int64_t inner_stride;        // stride[rank - 1] (0 for rank 0)
};
enum FFMode { FF_DENSE = 0, FF_SCALAR = 1, FF_STRIDED = 2 };

// i / size without a division, for the 32-bit index path (a division and a remainder per dim cost more than the
// rest of a bias add's offset): q = (mulhi(i, magic) + i) >> shift, with shift = ceil(log2(size)) and
// magic = floor(2^32 (2^shift - size) / size) + 1, exact for every i < 2^31 and 1 <= size < 2^31 (round-up magic
// numbers, as PyTorch's IntDivider; the sum stays below 2^32 since mulhi(i, magic) <= i).
inline void ff_set_divisor(int64_t size, uint32_t& magic, int& shift) {
    shift = 0;
    while (shift < 31 && ((int64_t)1 << shift) < size) ++shift;
    const uint64_t one = 1;
    magic = size < ((int64_t)1 << 31) ? (uint32_t)(((one << 32) * ((one << shift) - (uint64_t)size)) / (uint64_t)size + 1)
                                      : 0u;  // sizes of 2^31 or more occur only on the 64-bit path
}
#ifdef __CUDACC__
__host__ __device__ __forceinline__
#else
inline
#endif
uint32_t ff_div32(uint32_t i, uint32_t magic, int shift) {
    return ((uint32_t)(((uint64_t)i * magic) >> 32) + i) >> shift;
}
