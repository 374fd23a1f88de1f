
// ---- Row kernels: prologue -> statistics over a row (the trailing axes) -> epilogue, one launch per call.
// Adapted from dev/kernels/rowwise.cu; see fuseforge/families/rows/runtime.py for the Op interface.
constexpr int kFFRowWarpRows = 8;     // warp path: 256 threads, one row per warp
constexpr int kFFRowThreads = 512;    // block and two-pass paths: one row per block

template <class Stats>
__device__ __forceinline__ Stats ff_row_warp_reduce(Stats st) {
#pragma unroll
    for (int mask = 16; mask > 0; mask >>= 1) st.merge(st.shfl_xor(mask));
    return st;  // every lane holds the total
}

template <class Stats, int kThreads>
__device__ __forceinline__ Stats ff_row_block_reduce(Stats st) {
    constexpr int kWarps = kThreads / 32;
    __shared__ Stats partial[kWarps];
    __shared__ Stats total;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    st = ff_row_warp_reduce(st);
    if (lane == 0) partial[warp] = st;
    __syncthreads();
    if (warp == 0) {
        Stats s;
        if (lane < kWarps) {
            s = partial[lane];
        } else {
            s.init();
        }
        s = ff_row_warp_reduce(s);
        if (lane == 0) total = s;
    }
    __syncthreads();
    return total;
}

template <class Op>
struct FFRowCache {  // values per thread of the cached paths: <= 32 floats of inputs per thread
    static constexpr int kBig = Op::kFull == 1 ? 32 : (Op::kFull == 2 ? 16 : 8);
    static constexpr bool kCached = Op::kFull <= 4;
};

// Store four consecutive outputs of element c.. c+3 (float4) or one (scalar).
template <class Op>
__device__ __forceinline__ void ff_row_store4(const Op& op, int64_t at, const float o[4][Op::kOut > 0 ? Op::kOut : 1]) {
#pragma unroll
    for (int m = 0; m < Op::kOut; ++m)
        *reinterpret_cast<float4*>(op.out[m] + at) = make_float4(o[0][m], o[1][m], o[2][m], o[3][m]);
}

// One row, cached in registers: thread t of kThreads holds the inputs of up to NPT elements.
// Float4 layout: thread t owns elements 4*(t + k*kThreads) .. +3; scalar layout: t + k*kThreads.
template <class Op, int kThreads, int NPT, bool kVec, bool kBlock>
__device__ __forceinline__ void ff_row_cached(const Op& op, int64_t row, int cols, int t) {
    using Stats = typename Op::Stats;
    constexpr int F = Op::kFull;
    const int64_t base = row * (int64_t)cols;
    float in[NPT][F];
    Stats st;
    st.init();
    if constexpr (kVec) {
#pragma unroll
        for (int k = 0; k < NPT / 4; ++k) {
            const int c = 4 * (t + k * kThreads);
            if (c < cols) {
#pragma unroll
                for (int f = 0; f < F; ++f) {
                    const float4 q = __ldg(reinterpret_cast<const float4*>(op.full[f] + base + c));
                    in[4 * k + 0][f] = q.x; in[4 * k + 1][f] = q.y; in[4 * k + 2][f] = q.z; in[4 * k + 3][f] = q.w;
                }
#pragma unroll
                for (int j = 0; j < 4; ++j) st.add(op.reduced(in[4 * k + j], row, c + j));
            }
        }
    } else {  // element k of this thread at a constant offset from its first (one address register per input)
        const int valid = cols > t ? (cols - t + kThreads - 1) / kThreads : 0;  // elements of this thread
        const float* src[F];
#pragma unroll
        for (int f = 0; f < F; ++f) src[f] = op.full[f] + base + t;
#pragma unroll
        for (int k = 0; k < NPT; ++k) {
            if (k < valid) {
#pragma unroll
                for (int f = 0; f < F; ++f) in[k][f] = __ldg(src[f] + k * kThreads);
                st.add(op.reduced(in[k], row, t + k * kThreads));
            }
        }
    }
    if constexpr (kBlock) {
        st = ff_row_block_reduce<Stats, kThreads>(st);
    } else {
        st = ff_row_warp_reduce(st);
    }
    st.finalize(cols, Op::kEps);
    if constexpr (Op::kOut == 0) {
        op.row_values(st, row, cols, t == 0);
    } else {
        const typename Op::Row r = op.row_values(st, row, cols, t == 0);
        if constexpr (kVec) {
#pragma unroll
            for (int k = 0; k < NPT / 4; ++k) {
                const int c = 4 * (t + k * kThreads);
                if (c < cols) {
                    float o[4][Op::kOut];
#pragma unroll
                    for (int j = 0; j < 4; ++j) op.element(in[4 * k + j], st, r, row, c + j, o[j]);
                    ff_row_store4(op, base + c, o);
                }
            }
        } else {
            const int valid = cols > t ? (cols - t + kThreads - 1) / kThreads : 0;
            float* dst[Op::kOut];
#pragma unroll
            for (int m = 0; m < Op::kOut; ++m) dst[m] = op.out[m] + base + t;
#pragma unroll
            for (int k = 0; k < NPT; ++k) {
                if (k < valid) {
                    float o[Op::kOut];
                    op.element(in[k], st, r, row, t + k * kThreads, o);
#pragma unroll
                    for (int m = 0; m < Op::kOut; ++m) dst[m][k * kThreads] = o[m];
                }
            }
        }
    }
}

// One row of any length, two reads of the inputs (statistics, then outputs).
template <class Op, int kThreads, bool kVec>
__device__ __forceinline__ void ff_row_two_pass(const Op& op, int64_t row, int cols, int t) {
    using Stats = typename Op::Stats;
    constexpr int F = Op::kFull;
    const int64_t base = row * (int64_t)cols;
    Stats st;
    st.init();
    if constexpr (kVec) {
        for (int c = 4 * t; c < cols; c += 4 * kThreads) {
            float in[4][F];
#pragma unroll
            for (int f = 0; f < F; ++f) {
                const float4 q = __ldg(reinterpret_cast<const float4*>(op.full[f] + base + c));
                in[0][f] = q.x; in[1][f] = q.y; in[2][f] = q.z; in[3][f] = q.w;
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) st.add(op.reduced(in[j], row, c + j));
        }
    } else {
        for (int c = t; c < cols; c += kThreads) {
            float in[F];
#pragma unroll
            for (int f = 0; f < F; ++f) in[f] = __ldg(op.full[f] + base + c);
            st.add(op.reduced(in, row, c));
        }
    }
    st = ff_row_block_reduce<Stats, kThreads>(st);
    st.finalize(cols, Op::kEps);
    if constexpr (Op::kOut == 0) {
        op.row_values(st, row, cols, t == 0);
    } else {
        const typename Op::Row r = op.row_values(st, row, cols, t == 0);
        if constexpr (kVec) {
            for (int c = 4 * t; c < cols; c += 4 * kThreads) {
                float in[4][F];
#pragma unroll
                for (int f = 0; f < F; ++f) {
                    const float4 q = __ldg(reinterpret_cast<const float4*>(op.full[f] + base + c));
                    in[0][f] = q.x; in[1][f] = q.y; in[2][f] = q.z; in[3][f] = q.w;
                }
                float o[4][Op::kOut];
#pragma unroll
                for (int j = 0; j < 4; ++j) op.element(in[j], st, r, row, c + j, o[j]);
                ff_row_store4(op, base + c, o);
            }
        } else {
            for (int c = t; c < cols; c += kThreads) {
                float in[F];
#pragma unroll
                for (int f = 0; f < F; ++f) in[f] = __ldg(op.full[f] + base + c);
                float o[Op::kOut];
                op.element(in, st, r, row, c, o);
#pragma unroll
                for (int m = 0; m < Op::kOut; ++m) op.out[m][base + c] = o[m];
            }
        }
    }
}

// Launch bounds name a minimum of blocks per SM: without one, ptxas chose register targets that spilled a
// few bytes in some instantiations (NPT 32 around division's slow-path call). 2 x 256 and 1 x 512 threads
// cap registers at 128 as before.
template <class Op, int NPT, bool kVec>
__global__ void __launch_bounds__(32 * kFFRowWarpRows, 2) ff_row_warp_kernel(Op op, int64_t rows, int cols) {
    const int64_t row = (int64_t)blockIdx.x * kFFRowWarpRows + (threadIdx.x >> 5);
    if (row >= rows) return;  // the whole warp leaves together, so the shuffles stay full-mask
    ff_row_cached<Op, 32, NPT, kVec, false>(op, row, cols, threadIdx.x & 31);
}

template <class Op, int NPT, bool kVec>
__global__ void __launch_bounds__(kFFRowThreads, 1) ff_row_block_kernel(Op op, int64_t rows, int cols) {
    ff_row_cached<Op, kFFRowThreads, NPT, kVec, true>(op, blockIdx.x, cols, threadIdx.x);
}

template <class Op, bool kVec>
__global__ void __launch_bounds__(kFFRowThreads, 1) ff_row_two_pass_kernel(Op op, int64_t rows, int cols) {
    ff_row_two_pass<Op, kFFRowThreads, kVec>(op, blockIdx.x, cols, threadIdx.x);
}

template <class Op, bool kVec>
void ff_row_launch_variant(const Op& op, int64_t rows, int cols, cudaStream_t s) {
    constexpr int kBig = FFRowCache<Op>::kBig;
    if constexpr (FFRowCache<Op>::kCached) {
        if (cols <= 32 * kBig) {
            const unsigned grid = (unsigned)((rows + kFFRowWarpRows - 1) / kFFRowWarpRows);
            if (cols <= 32 * 8) {
                ff_row_warp_kernel<Op, 8, kVec><<<grid, 32 * kFFRowWarpRows, 0, s>>>(op, rows, cols);
            } else {
                ff_row_warp_kernel<Op, kBig, kVec><<<grid, 32 * kFFRowWarpRows, 0, s>>>(op, rows, cols);
            }
            return;
        }
        if (cols <= kFFRowThreads * 8) {
            ff_row_block_kernel<Op, 8, kVec><<<(unsigned)rows, kFFRowThreads, 0, s>>>(op, rows, cols);
            return;
        }
        if (cols <= kFFRowThreads * kBig) {
            ff_row_block_kernel<Op, kBig, kVec><<<(unsigned)rows, kFFRowThreads, 0, s>>>(op, rows, cols);
            return;
        }
    }
    ff_row_two_pass_kernel<Op, kVec><<<(unsigned)rows, kFFRowThreads, 0, s>>>(op, rows, cols);
}

// Rows along the channel axis of [N, C, S]: row r = n * S + s holds the C values n * C * S + c * S + s. One
// thread per row; consecutive threads take consecutive s, so each load of one channel is coalesced. Rows of
// up to NPT values (16 at most) stay in registers between the statistics and the epilogue; longer ones
// (NPT 0) are read twice, the second time mostly from L1 or L2.
constexpr int kFFRowChannelThreads = 256;

template <class Op, int NPT>
__global__ void __launch_bounds__(kFFRowChannelThreads) ff_row_channels_kernel(Op op, int64_t rows, int cols,
                                                                               int64_t positions) {
    using Stats = typename Op::Stats;
    constexpr int F = Op::kFull;
    const int64_t row = (int64_t)blockIdx.x * kFFRowChannelThreads + threadIdx.x;
    if (row >= rows) return;
    const int64_t n = row / positions;
    const int64_t base = n * cols * positions + (row - n * positions);
    Stats st;
    st.init();
    if constexpr (NPT > 0) {
        float in[NPT][F];
        // eight loads, then their statistics: loads interleaved with a branchy `add` (online softmax) went
        // out one at a time (0.14 ms for a [128, 16, 12600] softmax on an H100, 1.4 TB/s)
#pragma unroll
        for (int c0 = 0; c0 < NPT; c0 += 8) {
#pragma unroll
            for (int c = c0; c < c0 + 8; ++c) {
                if (c < cols) {
#pragma unroll
                    for (int f = 0; f < F; ++f) in[c][f] = __ldg(op.full[f] + base + c * positions);
                }
            }
#pragma unroll
            for (int c = c0; c < c0 + 8; ++c) {
                if (c < cols) st.add(op.reduced(in[c], row, c));
            }
        }
        st.finalize(cols, Op::kEps);
        if constexpr (Op::kOut == 0) {
            op.row_values(st, row, cols, true);
        } else {
            const typename Op::Row r = op.row_values(st, row, cols, true);
#pragma unroll
            for (int c = 0; c < NPT; ++c) {
                if (c < cols) {
                    float o[Op::kOut];
                    op.element(in[c], st, r, row, c, o);
#pragma unroll
                    for (int m = 0; m < Op::kOut; ++m) op.out[m][base + c * positions] = o[m];
                }
            }
        }
    } else {
#pragma unroll 4
        for (int c = 0; c < cols; ++c) {
            float in[F];
#pragma unroll
            for (int f = 0; f < F; ++f) in[f] = __ldg(op.full[f] + base + c * positions);
            st.add(op.reduced(in, row, c));
        }
        st.finalize(cols, Op::kEps);
        if constexpr (Op::kOut == 0) {
            op.row_values(st, row, cols, true);
        } else {
            const typename Op::Row r = op.row_values(st, row, cols, true);
            for (int c = 0; c < cols; ++c) {
                float in[F];
#pragma unroll
                for (int f = 0; f < F; ++f) in[f] = __ldg(op.full[f] + base + c * positions);
                float o[Op::kOut];
                op.element(in, st, r, row, c, o);
#pragma unroll
                for (int m = 0; m < Op::kOut; ++m) op.out[m][base + c * positions] = o[m];
            }
        }
    }
}

// Rows along the channel axis of a channels-last input (one full input): row r = n * S + s holds its C values
// adjacent, at r * C + c, so the block's 128 consecutive rows are one contiguous span of 128 * C values. The
// block copies that span into shared memory (coalesced), each thread walks its row there in channel order
// (the order of the kernel above: the same result), and writes its outputs NCHW at n * C * S + c * S + s:
// consecutive threads, consecutive positions (coalesced).
constexpr int kFFRowNhwcRows = 128;  // rows of a block; at most 256 channels (the binding checks): 128 x 257 floats

template <class Op>
__global__ void __launch_bounds__(kFFRowNhwcRows) ff_row_channels_nhwc_kernel(Op op, int64_t rows, int cols,
                                                                            int64_t positions) {
    using Stats = typename Op::Stats;
    extern __shared__ float ff_row_tile[];  // [kFFRowNhwcRows][stride]
    const int stride = cols | 1;  // odd: the threads' rows start in different banks
    const int64_t row0 = (int64_t)blockIdx.x * kFFRowNhwcRows;
    const int count = (int)(rows - row0 < kFFRowNhwcRows ? rows - row0 : kFFRowNhwcRows);
    const float* span = op.full[0] + row0 * cols;
    // Element i = threadIdx.x + 128 k of the span is (row r, channel c) = (i / cols, i % cols): one division per
    // thread, then steps of 128 (kFFRowNhwcRows / cols rows and kFFRowNhwcRows % cols channels); kLoads loads in
    // flight before their stores. Against a division per element and each store after its load: 741 -> 596 us on
    // 49's softmax + sigmoid over 64 channels of [16, 64, 32, 64, 64], H200 (bench/results/2026-11-28h_gpu).
    constexpr int kLoads = 8;
    const int total = count * cols, step_r = kFFRowNhwcRows / cols, step_c = kFFRowNhwcRows % cols;
    int r = (int)threadIdx.x / cols, c = (int)threadIdx.x - r * cols;
    for (int i0 = 0; i0 < total; i0 += kFFRowNhwcRows * kLoads) {
        float v[kLoads];
#pragma unroll
        for (int k = 0; k < kLoads; ++k) {
            const int i = i0 + k * kFFRowNhwcRows + (int)threadIdx.x;
            v[k] = i < total ? __ldg(span + i) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < kLoads; ++k) {
            if (i0 + k * kFFRowNhwcRows + (int)threadIdx.x < total) ff_row_tile[r * stride + c] = v[k];
            r += step_r;
            c += step_c;
            if (c >= cols) {
                c -= cols;
                ++r;
            }
        }
    }
    __syncthreads();
    if ((int)threadIdx.x >= count) return;
    const int64_t row = row0 + threadIdx.x;
    const float* mine = ff_row_tile + threadIdx.x * stride;
    Stats st;
    st.init();
    for (int c = 0; c < cols; ++c) {
        const float in[1] = {mine[c]};
        st.add(op.reduced(in, row, c));
    }
    st.finalize(cols, Op::kEps);
    if constexpr (Op::kOut == 0) {
        op.row_values(st, row, cols, true);
    } else {
        const typename Op::Row r = op.row_values(st, row, cols, true);
        const int64_t n = row / positions;
        const int64_t base = n * cols * positions + (row - n * positions);
        for (int c = 0; c < cols; ++c) {
            const float in[1] = {mine[c]};
            float o[Op::kOut];
            op.element(in, st, r, row, c, o);
#pragma unroll
            for (int m = 0; m < Op::kOut; ++m) op.out[m][base + c * positions] = o[m];
        }
    }
}

// Launch `op` over rows of C = cols values `positions` apart, or adjacent where `nhwc` (the binding checked rows,
// cols < 2^31, and that a channels-last input has one full input and at most 256 channels).
template <class Op>
int ff_row_channels_launch(const Op& op, int64_t rows, int64_t cols, int64_t positions, bool nhwc, void* stream) {
    if (rows == 0 || cols == 0) return 0;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if constexpr (Op::kFull == 1) {
        if (nhwc) {
            const size_t smem = sizeof(float) * kFFRowNhwcRows * (size_t)(cols | 1);
            auto kernel = ff_row_channels_nhwc_kernel<Op>;
            if (smem > 48 * 1024) {
                const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                             (int)smem);
                if (err != cudaSuccess) return (int)err;
            }
            const unsigned blocks = (unsigned)((rows + kFFRowNhwcRows - 1) / kFFRowNhwcRows);
            kernel<<<blocks, kFFRowNhwcRows, smem, s>>>(op, rows, (int)cols, positions);
            return (int)cudaGetLastError();
        }
    }
    if (nhwc) return (int)cudaErrorInvalidValue;  // the binding passes channels-last only with one full input
    const unsigned grid = (unsigned)((rows + kFFRowChannelThreads - 1) / kFFRowChannelThreads);
    if constexpr (FFRowCache<Op>::kCached) {
        if (cols <= 8) {
            ff_row_channels_kernel<Op, 8><<<grid, kFFRowChannelThreads, 0, s>>>(op, rows, (int)cols, positions);
            return (int)cudaGetLastError();
        }
        constexpr int kCache = FFRowCache<Op>::kBig < 16 ? FFRowCache<Op>::kBig : 16;  // 32 spilled around a
        if (cols <= kCache) {                                                             // division's slow path
            ff_row_channels_kernel<Op, kCache><<<grid, kFFRowChannelThreads, 0, s>>>(op, rows, (int)cols, positions);
            return (int)cudaGetLastError();
        }
    }
    ff_row_channels_kernel<Op, 0><<<grid, kFFRowChannelThreads, 0, s>>>(op, rows, (int)cols, positions);
    return (int)cudaGetLastError();
}

// Launch `op` over rows x cols (the binding checked the sizes: rows < 2^31, cols < 2^31).
template <class Op>
int ff_row_launch(const Op& op, int64_t rows, int64_t cols, void* stream) {
    if (rows == 0 || cols == 0) return 0;
    bool aligned = cols % 4 == 0;
    for (int f = 0; f < Op::kFull; ++f) aligned = aligned && reinterpret_cast<uintptr_t>(op.full[f]) % 16 == 0;
    for (int m = 0; m < Op::kOut; ++m) aligned = aligned && reinterpret_cast<uintptr_t>(op.out[m]) % 16 == 0;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (aligned) {
        ff_row_launch_variant<Op, true>(op, rows, (int)cols, s);
    } else {
        ff_row_launch_variant<Op, false>(op, rows, (int)cols, s);
    }
    return (int)cudaGetLastError();
}
