
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
