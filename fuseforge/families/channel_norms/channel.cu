
// ---- Channel kernels: train-mode batch norm with its prologue and epilogue, two launches per call.
// See fuseforge/families/channel_norms/runtime.py for the Op interface.
FF_HD float ff_chan_ldg(const float* p) {  // read-only load: the read-only data cache on the device
#ifdef __CUDA_ARCH__
    return __ldg(p);
#else
    return *p;
#endif
}

#include "welford.cuh"
// Welford statistics (count, mean, M2); Chan's merge (welford.cuh). Counts stay below 2^24 per part:
// exact floats.
struct FFChanStats {
    float n, mean, m2;
    FF_HD void init() { n = 0.0f; mean = 0.0f; m2 = 0.0f; }
    FF_HD static FFChanStats at(const float* p) { return {p[0], p[1], p[2]}; }  // a workspace entry
    FF_HD void store(float* p) const { p[0] = n; p[1] = mean; p[2] = m2; }
    FF_HD void add(float v) { ff_welford_add(*this, v); }
    FF_HD void merge(const FFChanStats& o) { ff_welford_merge(*this, o); }
    // four values: their own mean and M2, then one merge (one division per four values)
    FF_HD void add4(float a, float b, float c, float e) {
        FFChanStats q;
        q.n = 4.0f;
        q.mean = ((a + b) + (c + e)) * 0.25f;
        q.m2 = (a - q.mean) * (a - q.mean) + (b - q.mean) * (b - q.mean) + (c - q.mean) * (c - q.mean)
             + (e - q.mean) * (e - q.mean);
        merge(q);
    }
    // From a count, a sum and a sum of squares in double (each value and square exact), the mean less `shift`:
    // M2 = squares - sum * mean in double, each rounded to float once (empty where count is 0).
    FF_HD static FFChanStats of_sums(double count, double sum, double squares, double shift = 0.0) {
        FFChanStats st;
        st.init();
        if (count > 0.0) {
            const double mean = sum / count;
            st.n = (float)count;
            st.mean = (float)(mean - shift);
            st.m2 = (float)fmax(squares - sum * mean, 0.0);
        }
        return st;
    }
    __device__ FFChanStats shfl_xor(int lane_mask) const {
        FFChanStats o;
        ff_welford_shfl_xor(o, *this, lane_mask);
        return o;
    }
};

struct FFChanNorm {  // one unit's finalised statistics: the mean as hi + lo (two floats), and 1 / std
    float mean, lo, invstd;
};

__device__ __forceinline__ FFChanStats ff_chan_warp_reduce(FFChanStats st) {
#pragma unroll
    for (int mask = 16; mask > 0; mask >>= 1) st.merge(st.shfl_xor(mask));
    return st;  // lane 0's value is the one used
}

// The block's statistics, valid in thread 0 (merged in warp order: the same on every run).
__device__ __forceinline__ FFChanStats ff_chan_block_reduce(FFChanStats st) {
    constexpr int kWarps = kFFChanThreads / 32;
    __shared__ FFChanStats partial[kWarps];
    st = ff_chan_warp_reduce(st);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = st;
    __syncthreads();
    FFChanStats total;
    total.init();
    if (threadIdx.x == 0) {
        for (int w = 0; w < kWarps; ++w) total.merge(partial[w]);
    }
    return total;
}

__device__ __forceinline__ void ff_chan_store_partial(float* partial, const FFChanDims& d, int64_t c, int part,
                                                      const FFChanStats& st) {
    st.store(partial + (c * d.parts + part) * 3);
}

__device__ __forceinline__ uint32_t ff_chan_split(uint32_t total, int k, int parts) {
    return (uint32_t)((uint64_t)total * (uint64_t)k / (uint64_t)parts);
}

// Unit u's final statistics `st` (of the values less the unit's pivot): mean and 1 / std; `write`: this thread
// writes the per-unit results. The mean pivot + st.mean is kept as hi + lo (Knuth's two-sum: exact), so that the
// normalise's (v - hi) - lo is v - mean rounded once where v lies near the mean.
template <class Op>
__device__ __forceinline__ FFChanNorm ff_chan_norm(const Op& op, const FFChanStats& st, float pivot,
                                                   const FFChanDims& d, int64_t u, bool write) {
    const float count = (float)d.per_unit;
    FFChanNorm norm;
    ff_two_sum(pivot, st.mean, norm.mean, norm.lo);
    norm.invstd = 1.0f / sqrtf(st.m2 / count + Op::kEps);  // biased variance, eps inside the root
    if (write) op.channel_values(norm, st.m2, count, (int)u);
    return norm;
}

// Where value j of a unit lies, and its channel. Batch norm: j = n * HW + s of channel `unit`; group norm:
// the unit's values are contiguous from `base`, channel = the group's first channel `c0` + j / HW.
struct FFChanUnit {
    int64_t unit, base;
    int c0;
};
__device__ __forceinline__ FFChanUnit ff_chan_unit(const FFChanDims& d, int64_t unit) {  // once per block
    if (d.groups == 0) return {unit, 0, (int)unit};
    return {unit, unit * d.per_unit, (int)((unit % d.groups) * (d.channels / d.groups))};
}
struct FFChanAt {
    int64_t at;
    int c;
};
__device__ __forceinline__ FFChanAt ff_chan_at(const FFChanDims& d, const FFChanUnit& u, uint32_t j) {
    const uint32_t hw = (uint32_t)d.hw;
    if (d.groups == 0) {
        const uint32_t n = j / hw, s = j - n * hw;
        return {((int64_t)n * d.channels + u.unit) * d.hw + s, u.c0};
    }
    return {u.base + j, u.c0 + (int)(j / hw)};
}

// Where value j of unit u lies (its flat index in the full-shape inputs) and its channel, in either layout: the unit's
// values in NCHW order (batch norm: j = n * HW + s of channel u; group norm: channel within the group, then s).
__device__ __forceinline__ FFChanAt ff_chan_value_at(const FFChanDims& d, const FFChanUnit& unit, int64_t u,
                                                      uint32_t j) {
    if (!d.nhwc) return ff_chan_at(d, unit, j);
    if (d.groups == 0) {  // channels-last batch norm: channel u of sample n at position s
        const int64_t n = j / d.hw, s = j - n * d.hw;
        return {(n * d.hw + s) * d.channels + u, (int)u};
    }
    const int64_t per = d.channels / d.groups, n = u / d.groups;  // channels-last group norm
    const int64_t cg = j / d.hw, s = j - cg * d.hw;
    const int c = (int)((u - n * d.groups) * per + cg);
    return {(n * d.hw + s) * d.channels + c, c};
}

constexpr int kFFChanPivotSamples = 32;

// Unit u's pivot: the statistics are those of v - pivot. Where the values lie far from zero next to their spread (a
// convolution's bias larger than the spread of its outputs), a pivot near their mean makes Welford's updates round at
// the spread's scale, not at the values'; where their mean is near zero next to their spread (a batch norm of values
// that were normalised before), any pivot of the spread's size would make them round at that scale, and the mean
// (a running mean's update) lose what eager keeps. So: the mean of kFFChanPivotSamples values spread over the unit
// (the prologue's results there; those not finite left out), or 0 where that mean is within a quarter of the
// samples' range of zero (the mean of 32 samples is within range / 4 of the true one). Every thread of every block
// of the unit computes the same samples in the same order: the same pivot.
template <class Op>
__device__ __forceinline__ float ff_chan_pivot(const Op& op, const FFChanDims& d, int64_t u) {
    const FFChanUnit unit = ff_chan_unit(d, u);
    float sum = 0.0f, lo = INFINITY, hi = -INFINITY;
    int finite = 0;
#pragma unroll 4
    for (int i = 0; i < kFFChanPivotSamples; ++i) {
        const uint32_t j = (uint32_t)((uint64_t)d.per_unit * (uint64_t)i / kFFChanPivotSamples);
        const FFChanAt p = ff_chan_value_at(d, unit, u, j);
        float in[Op::kFull];
#pragma unroll
        for (int f = 0; f < Op::kFull; ++f) in[f] = ff_chan_ldg(op.full[f] + p.at);
        const float v = op.reduced(in, p.c);
        if (!isfinite(v)) continue;
        sum += v;
        lo = fminf(lo, v);
        hi = fmaxf(hi, v);
        ++finite;
    }
    if (finite == 0) return 0.0f;
    const float mean = sum / (float)finite;
    return 4.0f * fabsf(mean) < hi - lo ? 0.0f : mean;
}

// Merge unit c's partials in part order; finalise; `write`: this thread writes the per-unit results.
template <class Op>
__device__ __forceinline__ FFChanNorm ff_chan_finalize(const Op& op, const float* partial, const FFChanDims& d,
                                                       int64_t c, bool write) {
    FFChanStats st;
    st.init();
    for (int part = 0; part < d.parts; ++part) st.merge(FFChanStats::at(partial + (c * d.parts + part) * 3));
    return ff_chan_norm(op, st, ff_chan_pivot(op, d, c), d, c, write);
}

// Planes: block (unit blockIdx.x, part blockIdx.y) takes the part's values j of the unit.
template <class Op, bool kVec>
__global__ void __launch_bounds__(kFFChanThreads) ff_chan_plane_stats(Op op, FFChanDims d, float* partial) {
    constexpr int F = Op::kFull;
    const int64_t unit = blockIdx.x;
    const FFChanUnit u = ff_chan_unit(d, unit);
    const int part = blockIdx.y;
    const float pivot = ff_chan_pivot(op, d, unit);
    FFChanStats st;
    st.init();
    if constexpr (kVec) {
        const uint32_t quads = (uint32_t)(d.per_unit / 4);
        const uint32_t end = ff_chan_split(quads, part + 1, d.parts);
        for (uint32_t q = ff_chan_split(quads, part, d.parts) + threadIdx.x; q < end; q += kFFChanThreads) {
            const FFChanAt p = ff_chan_at(d, u, 4 * q);  // HW % 4 == 0: four values of one channel
            float in[4][F];
#pragma unroll
            for (int f = 0; f < F; ++f) {
                const float4 v = __ldg(reinterpret_cast<const float4*>(op.full[f] + p.at));
                in[0][f] = v.x; in[1][f] = v.y; in[2][f] = v.z; in[3][f] = v.w;
            }
            st.add4(op.reduced(in[0], p.c) - pivot, op.reduced(in[1], p.c) - pivot,
                    op.reduced(in[2], p.c) - pivot, op.reduced(in[3], p.c) - pivot);
        }
    } else {
        const uint32_t total = (uint32_t)d.per_unit;
        const uint32_t end = ff_chan_split(total, part + 1, d.parts);
        for (uint32_t j = ff_chan_split(total, part, d.parts) + threadIdx.x; j < end; j += kFFChanThreads) {
            const FFChanAt p = ff_chan_at(d, u, j);
            float in[F];
#pragma unroll
            for (int f = 0; f < F; ++f) in[f] = __ldg(op.full[f] + p.at);
            st.add(op.reduced(in, p.c) - pivot);
        }
    }
    st = ff_chan_block_reduce(st);
    if (threadIdx.x == 0) ff_chan_store_partial(partial, d, unit, part, st);
}

template <class Op, bool kVec>
__global__ void __launch_bounds__(kFFChanThreads) ff_chan_plane_apply(Op op, FFChanDims d, const float* partial) {
    constexpr int F = Op::kFull;
    const int64_t unit = blockIdx.x;
    const int part = blockIdx.y;
    const FFChanNorm norm = ff_chan_finalize(op, partial, d, unit, part == 0 && threadIdx.x == 0);
    const FFChanUnit u = ff_chan_unit(d, unit);
    if constexpr (Op::kOut > 0) {
        if constexpr (kVec) {
            const uint32_t quads = (uint32_t)(d.per_unit / 4);
            const uint32_t end = ff_chan_split(quads, part + 1, d.parts);
            for (uint32_t q = ff_chan_split(quads, part, d.parts) + threadIdx.x; q < end; q += kFFChanThreads) {
                const FFChanAt p = ff_chan_at(d, u, 4 * q);
                float in[4][F];
#pragma unroll
                for (int f = 0; f < F; ++f) {
                    const float4 v = __ldg(reinterpret_cast<const float4*>(op.full[f] + p.at));
                    in[0][f] = v.x; in[1][f] = v.y; in[2][f] = v.z; in[3][f] = v.w;
                }
                float o[4][Op::kOut];
#pragma unroll
                for (int k = 0; k < 4; ++k) op.element(in[k], norm, p.c, o[k]);
#pragma unroll
                for (int m = 0; m < Op::kOut; ++m)
                    *reinterpret_cast<float4*>(op.out[m] + p.at) = make_float4(o[0][m], o[1][m], o[2][m], o[3][m]);
            }
        } else {
            const uint32_t total = (uint32_t)d.per_unit;
            const uint32_t end = ff_chan_split(total, part + 1, d.parts);
            for (uint32_t j = ff_chan_split(total, part, d.parts) + threadIdx.x; j < end; j += kFFChanThreads) {
                const FFChanAt p = ff_chan_at(d, u, j);
                float in[F];
#pragma unroll
                for (int f = 0; f < F; ++f) in[f] = __ldg(op.full[f] + p.at);
                float o[Op::kOut];
                op.element(in, norm, p.c, o);
#pragma unroll
                for (int m = 0; m < Op::kOut; ++m) op.out[m][p.at] = o[m];
            }
        }
    }
}

// Columns ([N, C]): block (32 channels from 32 * blockIdx.x, part blockIdx.y); lane = channel, warp = row lane. A
// channel's rows are few per thread (N / 8 / parts), where Welford's first updates would round a mean near zero at the
// values' scale (a batch norm of values normalised before): each thread sums its values less the pivot and their
// squares in double (each exact), the row lanes' sums are added in row-lane order, and the part's mean and M2 are
// rounded to float once.
template <class Op>
__global__ void __launch_bounds__(kFFChanThreads) ff_chan_column_stats(Op op, FFChanDims d, float* partial) {
    constexpr int F = Op::kFull;
    constexpr int kRowLanes = kFFChanThreads / 32;
    const int lane = threadIdx.x & 31, row_lane = threadIdx.x >> 5;
    const int64_t c = (int64_t)blockIdx.x * 32 + lane;
    const int part = blockIdx.y;
    const uint32_t rows = (uint32_t)d.batch;
    double count = 0.0, sum = 0.0, squares = 0.0;
    if (c < d.channels) {
        const double pivot = (double)ff_chan_pivot(op, d, c);
        const uint32_t end = ff_chan_split(rows, part + 1, d.parts);
        for (uint32_t n = ff_chan_split(rows, part, d.parts) + row_lane; n < end; n += kRowLanes) {
            float in[F];
#pragma unroll
            for (int f = 0; f < F; ++f) in[f] = __ldg(op.full[f] + (int64_t)n * d.channels + c);
            const double v = (double)op.reduced(in, (int)c) - pivot;
            count += 1.0;
            sum += v;
            squares = fma(v, v, squares);
        }
    }
    __shared__ double lanes[kRowLanes][3][32];
    lanes[row_lane][0][lane] = count;
    lanes[row_lane][1][lane] = sum;
    lanes[row_lane][2][lane] = squares;
    __syncthreads();
    if (row_lane == 0 && c < d.channels) {
        for (int r = 1; r < kRowLanes; ++r) {
            count += lanes[r][0][lane];
            sum += lanes[r][1][lane];
            squares += lanes[r][2][lane];
        }
        ff_chan_store_partial(partial, d, c, part, FFChanStats::of_sums(count, sum, squares));
    }
}

template <class Op>
__global__ void __launch_bounds__(kFFChanThreads) ff_chan_column_apply(Op op, FFChanDims d, const float* partial) {
    constexpr int F = Op::kFull;
    constexpr int kRowLanes = kFFChanThreads / 32;
    const int lane = threadIdx.x & 31, row_lane = threadIdx.x >> 5;
    const int64_t c = (int64_t)blockIdx.x * 32 + lane;
    const int part = blockIdx.y;
    if (c >= d.channels) return;  // no block-wide synchronisation below
    const FFChanNorm norm = ff_chan_finalize(op, partial, d, c, part == 0 && row_lane == 0);
    if constexpr (Op::kOut > 0) {
        const uint32_t rows = (uint32_t)d.batch;
        const uint32_t end = ff_chan_split(rows, part + 1, d.parts);
        for (uint32_t n = ff_chan_split(rows, part, d.parts) + row_lane; n < end; n += kRowLanes) {
            const int64_t at = (int64_t)n * d.channels + c;
            float in[F];
#pragma unroll
            for (int f = 0; f < F; ++f) in[f] = __ldg(op.full[f] + at);
            float o[Op::kOut];
            op.element(in, norm, (int)c, o);
#pragma unroll
            for (int m = 0; m < Op::kOut; ++m) op.out[m][at] = o[m];
        }
    }
}

// A warp's sum of its lanes' doubles, in a fixed order (xor steps), lane 0's taken by every lane.
__device__ __forceinline__ double ff_chan_warp_sum(double v) {
#pragma unroll
    for (int mask = 16; mask > 0; mask >>= 1) v += __shfl_xor_sync(0xffffffffu, v, mask);
    return __shfl_sync(0xffffffffu, v, 0);
}

// Small units (at most kFFChanWarpUnit values, e.g. group norm over [N, C] with a few channels per group): a warp per
// unit, one launch; each lane keeps its kFFChanWarpPerLane values in registers from the statistics to the
// normalised ops, so the statistics take two passes over them in double: the mean, then the squared deviations.
// (A block per unit would leave most of its threads idle, in twice as many launches.)
constexpr int kFFChanWarpPerLane = 8;
constexpr int64_t kFFChanWarpUnit = 32 * kFFChanWarpPerLane;
// (Bounds of at least one block per SM: with the default ones ptxas spills 8 bytes for some Op structs.)
template <class Op>
__global__ void __launch_bounds__(kFFChanThreads, 1) ff_chan_warp_units(Op op, FFChanDims d) {
    constexpr int F = Op::kFull, V = kFFChanWarpPerLane;
    const int lane = threadIdx.x & 31;
    const int64_t unit = (int64_t)blockIdx.x * (kFFChanThreads / 32) + (threadIdx.x >> 5);
    if (unit >= d.units) return;  // whole warps leave: no block-wide synchronisation below
    const FFChanUnit u = ff_chan_unit(d, unit);
    const uint32_t total = (uint32_t)d.per_unit;
    float in[V][F];
    double sum = 0.0;
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const uint32_t j = (uint32_t)lane + 32u * k;
        if (j < total) {
            const FFChanAt p = ff_chan_at(d, u, j);
#pragma unroll
            for (int f = 0; f < F; ++f) in[k][f] = __ldg(op.full[f] + p.at);
            sum += (double)op.reduced(in[k], p.c);
        }
    }
    const double mean = ff_chan_warp_sum(sum) / (double)total;
    double m2 = 0.0;  // the values normalised computed again from the inputs kept (fewer registers than keeping them)
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const uint32_t j = (uint32_t)lane + 32u * k;
        if (j < total) {
            const double e = (double)op.reduced(in[k], ff_chan_at(d, u, j).c) - mean;
            m2 += e * e;
        }
    }
    m2 = ff_chan_warp_sum(m2);
    // The unit's statistics from double sums (each value and square exact: the mean near zero keeps its precision),
    // as ff_chan_norm takes them: the mean as its float hi, pivot of the rest, lo.
    const float hi = (float)mean;
    FFChanStats st;
    st.n = (float)total;
    st.mean = (float)(mean - (double)hi);
    st.m2 = (float)m2;
    const FFChanNorm norm = ff_chan_norm(op, st, hi, d, unit, lane == 0);
    if constexpr (Op::kOut > 0) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const uint32_t j = (uint32_t)lane + 32u * k;
            if (j < total) {
                const FFChanAt p = ff_chan_at(d, u, j);
                float o[Op::kOut];
                op.element(in[k], norm, p.c, o);
#pragma unroll
                for (int m = 0; m < Op::kOut; ++m) op.out[m][p.at] = o[m];
            }
        }
    }
}

template <class Op>
int ff_chan_nhwc_launch(const Op& op, const FFChanDims& d, float* workspace, void* stream);

// The planes' 16-byte path: HW % 4 == 0 and every full-shape pointer aligned (four values never straddle a plane).
template <class Op>
bool ff_chan_planes_aligned(const Op& op, const FFChanDims& d) {
    bool aligned = d.hw % 4 == 0;
    for (int f = 0; f < Op::kFull; ++f) aligned = aligned && reinterpret_cast<uintptr_t>(op.full[f]) % 16 == 0;
    for (int m = 0; m < Op::kOut; ++m) aligned = aligned && reinterpret_cast<uintptr_t>(op.out[m]) % 16 == 0;
    return aligned;
}

// The planes' apply launch: finalise each unit's partials, normalise, the fused ops.
template <class Op>
int ff_chan_plane_apply_launch(const Op& op, const FFChanDims& d, const float* partial, cudaStream_t s) {
    const dim3 grid((unsigned)d.units, (unsigned)d.parts);
    if (ff_chan_planes_aligned(op, d)) {
        ff_chan_plane_apply<Op, true><<<grid, kFFChanThreads, 0, s>>>(op, d, partial);
    } else {
        ff_chan_plane_apply<Op, false><<<grid, kFFChanThreads, 0, s>>>(op, d, partial);
    }
    return (int)cudaGetLastError();
}

// Launch `op` over d (checked by the binding): statistics into `partial` [units][parts][3], then apply.
template <class Op>
int ff_chan_launch(const Op& op, const FFChanDims& d, float* partial, void* stream) {
    if (d.per_unit == 0 || d.units == 0) return 0;
    if constexpr (Op::kFull == 1) {
        if (d.nhwc) return ff_chan_nhwc_launch(op, d, partial, stream);
    }
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (d.columns) {
        const dim3 grid((unsigned)((d.channels + 31) / 32), (unsigned)d.parts);
        ff_chan_column_stats<Op><<<grid, kFFChanThreads, 0, s>>>(op, d, partial);
        const int code = (int)cudaGetLastError();
        if (code != 0) return code;
        ff_chan_column_apply<Op><<<grid, kFFChanThreads, 0, s>>>(op, d, partial);
        return (int)cudaGetLastError();
    }
    if (d.per_unit <= kFFChanWarpUnit) {
        constexpr int64_t kWarps = kFFChanThreads / 32;
        ff_chan_warp_units<Op><<<(unsigned)((d.units + kWarps - 1) / kWarps), kFFChanThreads, 0, s>>>(op, d);
        return (int)cudaGetLastError();
    }
    const dim3 grid((unsigned)d.units, (unsigned)d.parts);
    if (ff_chan_planes_aligned(op, d)) {
        ff_chan_plane_stats<Op, true><<<grid, kFFChanThreads, 0, s>>>(op, d, partial);
    } else {
        ff_chan_plane_stats<Op, false><<<grid, kFFChanThreads, 0, s>>>(op, d, partial);
    }
    const int code = (int)cudaGetLastError();
    if (code != 0) return code;
    return ff_chan_plane_apply_launch(op, d, partial, s);
}

// Statistics taken elsewhere (a conv kernel that stored the normalised tensor: families/conv/direct.cuh's
// launch_store_stats): sums[2u] and sums[2u + 1] are the sum and the sum of squares of unit u's values, in
// doubles. Part 0 of each unit's partials gets (count, mean, M2) from them, M2 = sum of squares - sum * mean in
// double (exact enough: the doubles hold each square exactly); the unit's other parts are empty (count 0, which
// Chan's merge skips), so the apply kernel's merge in part order finds the unit's statistics.
template <class Op>
__global__ void ff_chan_partials_of_sums(Op op, const double* __restrict__ sums, float* __restrict__ partial,
                                         FFChanDims d) {
    const int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= d.units) return;
    // the partials hold the mean less the pivot
    const FFChanStats st = FFChanStats::of_sums((double)d.per_unit, sums[2 * u], sums[2 * u + 1],
                                                (double)ff_chan_pivot(op, d, u));
    for (int part = 0; part < d.parts; ++part) {
        FFChanStats empty;
        empty.init();
        ff_chan_store_partial(partial, d, u, part, part == 0 ? st : empty);
    }
}

// Normalise with the statistics in `sums` (above): one small launch, then the plane path's apply launch. Where the
// call's sizes take another path (a channels-last input, [N, C], units of at most kFFChanWarpUnit values), the
// statistics are taken again from the input by that path instead (`ff_chan_launch`): the same results.
template <class Op>
int ff_chan_launch_with_sums(const Op& op, const FFChanDims& d, const double* sums, float* partial, void* stream) {
    if (d.per_unit == 0 || d.units == 0) return 0;
    if (d.nhwc || d.columns || d.per_unit <= kFFChanWarpUnit) return ff_chan_launch(op, d, partial, stream);
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    ff_chan_partials_of_sums<Op><<<(unsigned)((d.units + 255) / 256), 256, 0, s>>>(op, sums, partial, d);
    const int code = (int)cudaGetLastError();
    if (code != 0) return code;
    return ff_chan_plane_apply_launch(op, d, partial, s);
}
