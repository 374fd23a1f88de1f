// Tile-transpose variants between NCHW ([N, C, S]) and NHWC ([N, S, C]) for fp32, timed on the GPU.
//
//   nvcc -O3 -arch=sm_90a -o transpose_lab dev/kernels/transpose_lab.cu && ./transpose_lab
//
// (2026-11-28: prefetch_rows_kernel, a persistent grid that loads its next tile while storing this one, with and
// without the product's kind of epilogue; 93's and 16's tail shapes. Not run on a GPU yet: bench/GPU_RUNS.md.)
//
// Which design makes the transposing kernels (ff_channels_last, the pointwise tiled path, the NHWC
// normalise) run near the copy rate: scalar 4-byte accesses with 8 elements per thread (what the kernels
// do now), 16-byte accesses on one or both sides, and 16 elements per thread. Tiles are W channels x P
// positions (W = C rounded up to a power of two, at most 32). Every variant's output is checked against a
// plain per-element transpose. Prints GB/s counting one read and one write, and a cudaMemcpy D2D as the
// ceiling. Variant names: <kind><per thread>x<blocks per SM>, x0 = one tile per block (grid = tiles).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

struct Geo {
    int64_t N, C, S;
    int W, P;  // tile channels, tile positions
    int64_t ct, st, count;
};

static Geo geo(int64_t N, int64_t C, int64_t S, int elements) {
    Geo g{N, C, S, 1, 0, 0, 0, 0};
    while (g.W < C && g.W < 32) g.W *= 2;
    g.P = elements / g.W;
    g.ct = (C + g.W - 1) / g.W;
    g.st = (S + g.P - 1) / g.P;
    g.count = N * g.ct * g.st;
    return g;
}

// Scalar: EPT elements per thread, 256 threads, tile W x P with P * W = 256 * EPT; smem [P][W | 1].
// kToNhwc: in NCHW, out NHWC; else in NHWC, out NCHW.
template <bool kToNhwc, int EPT>
__global__ void __launch_bounds__(256) scalar_kernel(const float* __restrict__ in, float* __restrict__ out, Geo g) {
    __shared__ float tile[256 * EPT * 2];
    const int lw = __ffs(g.W) - 1, lp = __ffs(g.P) - 1, pitch = g.W | 1;
    for (int64_t t = blockIdx.x; t < g.count; t += gridDim.x) {
        const int64_t s0 = (t % g.st) * g.P, c0 = (t / g.st % g.ct) * g.W, n = t / g.st / g.ct;
        float v[EPT];
        int at[EPT];
#pragma unroll
        for (int j = 0; j < EPT; ++j) {
            const int k = j * 256 + threadIdx.x;
            int p, c;
            if (kToNhwc) { p = k & (g.P - 1); c = k >> lp; } else { c = k & (g.W - 1); p = k >> lw; }
            const int64_t s = s0 + p, cc = c0 + c;
            at[j] = s < g.S && cc < g.C ? p * pitch + c : -1;
            v[j] = at[j] >= 0 ? __ldg(in + (kToNhwc ? (n * g.C + cc) * g.S + s : (n * g.S + s) * g.C + cc)) : 0.f;
        }
#pragma unroll
        for (int j = 0; j < EPT; ++j) if (at[j] >= 0) tile[at[j]] = v[j];
        __syncthreads();
#pragma unroll
        for (int j = 0; j < EPT; ++j) {
            const int k = j * 256 + threadIdx.x;
            int p, c;
            if (kToNhwc) { c = k & (g.W - 1); p = k >> lw; } else { p = k & (g.P - 1); c = k >> lp; }
            const int64_t s = s0 + p, cc = c0 + c;
            if (s < g.S && cc < g.C) out[kToNhwc ? (n * g.S + s) * g.C + cc : (n * g.C + cc) * g.S + s] = tile[p * pitch + c];
        }
        __syncthreads();
    }
}

// Vector: 16-byte accesses on both sides (C % 4 == 0, S % 4 == 0, W >= 4). QPT quads per thread.
// The smem tile is laid out along the input's contiguous axis with a pitch that keeps 16-byte alignment:
// to NHWC: [W][P + 4] (input rows are channels); to NCHW: [P][W + 4].
template <bool kToNhwc, int QPT>
__global__ void __launch_bounds__(256) vector_kernel(const float* __restrict__ in, float* __restrict__ out, Geo g) {
    __shared__ __align__(16) float tile[2048 * QPT];  // W * P + 4 * max(W, P) <= 2 * 1024 * QPT
    const int qw = g.W / 4, qp = g.P / 4;
    for (int64_t t = blockIdx.x; t < g.count; t += gridDim.x) {
        const int64_t s0 = (t % g.st) * g.P, c0 = (t / g.st % g.ct) * g.W, n = t / g.st / g.ct;
        float4 v[QPT];
        int at[QPT];
#pragma unroll
        for (int j = 0; j < QPT; ++j) {
            const int q = j * 256 + threadIdx.x;
            if (kToNhwc) {  // quads along positions of channel c
                const int p = (q % qp) * 4, c = q / qp;
                const int64_t s = s0 + p, cc = c0 + c;
                at[j] = s < g.S && cc < g.C ? c * (g.P + 4) + p : -1;
                if (at[j] >= 0) v[j] = __ldg(reinterpret_cast<const float4*>(in + (n * g.C + cc) * g.S + s));
            } else {  // quads along channels of position p
                const int c = (q % qw) * 4, p = q / qw;
                const int64_t s = s0 + p, cc = c0 + c;
                at[j] = s < g.S && cc < g.C ? p * (g.W + 4) + c : -1;
                if (at[j] >= 0) v[j] = __ldg(reinterpret_cast<const float4*>(in + (n * g.S + s) * g.C + cc));
            }
        }
#pragma unroll
        for (int j = 0; j < QPT; ++j) if (at[j] >= 0) *reinterpret_cast<float4*>(tile + at[j]) = v[j];
        __syncthreads();
#pragma unroll
        for (int j = 0; j < QPT; ++j) {
            const int q = j * 256 + threadIdx.x;
            if (kToNhwc) {  // quads along channels of position p: 4 reads down the [W][P + 4] tile
                const int c = (q % qw) * 4, p = q / qw;
                const int64_t s = s0 + p, cc = c0 + c;
                if (s < g.S && cc < g.C) {
                    const float* r = tile + c * (g.P + 4) + p;
                    *reinterpret_cast<float4*>(out + (n * g.S + s) * g.C + cc) =
                        make_float4(r[0], r[g.P + 4], r[2 * (g.P + 4)], r[3 * (g.P + 4)]);
                }
            } else {  // quads along positions of channel c
                const int p = (q % qp) * 4, c = q / qp;
                const int64_t s = s0 + p, cc = c0 + c;
                if (s < g.S && cc < g.C) {
                    const float* r = tile + p * (g.W + 4) + c;
                    *reinterpret_cast<float4*>(out + (n * g.C + cc) * g.S + s) =
                        make_float4(r[0], r[g.W + 4], r[2 * (g.W + 4)], r[3 * (g.W + 4)]);
                }
            }
        }
        __syncthreads();
    }
}


// To NCHW with the tile laid out [W][P + 4] (channel rows): each quad read along channels is stored as four
// scalars down a column; the write phase reads 16 bytes along positions.
template <int QPT>
__global__ void __launch_bounds__(256) vector_rows_kernel(const float* __restrict__ in, float* __restrict__ out, Geo g) {
    __shared__ __align__(16) float tile[2048 * QPT];
    const int qw = g.W / 4, qp = g.P / 4, pitch = g.P + 4;
    for (int64_t t = blockIdx.x; t < g.count; t += gridDim.x) {
        const int64_t s0 = (t % g.st) * g.P, c0 = (t / g.st % g.ct) * g.W, n = t / g.st / g.ct;
        float4 v[QPT];
        int at[QPT];
#pragma unroll
        for (int j = 0; j < QPT; ++j) {
            const int q = j * 256 + threadIdx.x;
            const int c = (q % qw) * 4, p = q / qw;
            const int64_t s = s0 + p, cc = c0 + c;
            at[j] = s < g.S && cc < g.C ? c * pitch + p : -1;
            if (at[j] >= 0) v[j] = __ldg(reinterpret_cast<const float4*>(in + (n * g.S + s) * g.C + cc));
        }
#pragma unroll
        for (int j = 0; j < QPT; ++j)
            if (at[j] >= 0) {
                tile[at[j]] = v[j].x;
                tile[at[j] + pitch] = v[j].y;
                tile[at[j] + 2 * pitch] = v[j].z;
                tile[at[j] + 3 * pitch] = v[j].w;
            }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < QPT; ++j) {
            const int q = j * 256 + threadIdx.x;
            const int p = (q % qp) * 4, c = q / qp;
            const int64_t s = s0 + p, cc = c0 + c;
            if (s < g.S && cc < g.C)
                *reinterpret_cast<float4*>(out + (n * g.C + cc) * g.S + s) = *reinterpret_cast<const float4*>(tile + c * pitch + p);
        }
        __syncthreads();
    }
}

// To NCHW like vector_rows_kernel, on a persistent grid whose blocks load their next tile's quads into registers
// before they store this one's (the loads in flight while the stores go out), with the pointwise tanh(x + b[c]) * 0.5
// of the product's tiled epilogue where kEpilogue (bias: one value per channel). One tile per block (grid = tiles)
// when launched so: then it is vector_rows_kernel with the epilogue.
template <int QPT, bool kEpilogue>
__global__ void __launch_bounds__(256) prefetch_rows_kernel(const float* __restrict__ in, float* __restrict__ out,
                                                            const float* __restrict__ bias, Geo g) {
    __shared__ __align__(16) float tile[2048 * QPT];
    const int qw = g.W / 4, qp = g.P / 4, pitch = g.P + 4;
    float4 v[QPT];
    int at[QPT];
    auto load = [&](int64_t t) {
        const int64_t s0 = (t % g.st) * g.P, c0 = (t / g.st % g.ct) * g.W, n = t / g.st / g.ct;
#pragma unroll
        for (int j = 0; j < QPT; ++j) {
            const int q = j * 256 + threadIdx.x;
            const int c = (q % qw) * 4, p = q / qw;
            const int64_t s = s0 + p, cc = c0 + c;
            at[j] = s < g.S && cc < g.C ? c * pitch + p : -1;
            if (at[j] >= 0) v[j] = __ldg(reinterpret_cast<const float4*>(in + (n * g.S + s) * g.C + cc));
        }
    };
    int64_t t = blockIdx.x;
    if (t < g.count) load(t);
    for (; t < g.count; t += gridDim.x) {
        const int64_t s0 = (t % g.st) * g.P, c0 = (t / g.st % g.ct) * g.W, n = t / g.st / g.ct;
#pragma unroll
        for (int j = 0; j < QPT; ++j)
            if (at[j] >= 0) {
                tile[at[j]] = v[j].x;
                tile[at[j] + pitch] = v[j].y;
                tile[at[j] + 2 * pitch] = v[j].z;
                tile[at[j] + 3 * pitch] = v[j].w;
            }
        __syncthreads();
        if (t + gridDim.x < g.count) load(t + gridDim.x);  // the next tile's loads, in flight during the stores
#pragma unroll
        for (int j = 0; j < QPT; ++j) {
            const int q = j * 256 + threadIdx.x;
            const int p = (q % qp) * 4, c = q / qp;
            const int64_t s = s0 + p, cc = c0 + c;
            if (s < g.S && cc < g.C) {
                float4 o = *reinterpret_cast<const float4*>(tile + c * pitch + p);
                if (kEpilogue) {
                    const float b = __ldg(bias + cc);
                    o = make_float4(tanhf(o.x + b) * 0.5f, tanhf(o.y + b) * 0.5f, tanhf(o.z + b) * 0.5f,
                                    tanhf(o.w + b) * 0.5f);
                }
                *reinterpret_cast<float4*>(out + (n * g.C + cc) * g.S + s) = o;
            }
        }
        __syncthreads();
    }
}

template <class F>
static float time_ms(F launch, float* flush, size_t flush_bytes) {
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    for (int i = 0; i < 3; ++i) launch();
    std::vector<float> ts;
    for (int i = 0; i < 30; ++i) {
        CHECK(cudaMemsetAsync(flush, i, flush_bytes));
        CHECK(cudaEventRecord(a));
        launch();
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
}

int main() {
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    // the last two: the tails of 93 ([128, 128, 130, 130]) and 16 ([128, 64, 256, 256]), channels-last -> NCHW
    const int64_t shapes[][3] = {{64, 16, 16384}, {64, 32, 4096}, {64, 32, 16384}, {64, 64, 16384}, {32, 4, 78408},
                                 {64, 16, 65536}, {128, 128, 16900}, {128, 64, 65536}};
    const size_t flush_bytes = 256u << 20;
    float* flush;
    CHECK(cudaMalloc(&flush, flush_bytes));
    for (auto& sh : shapes) {
        const int64_t N = sh[0], C = sh[1], S = sh[2], n = N * C * S;
        float *in, *out, *ref;
        CHECK(cudaMalloc(&in, n * 4));
        CHECK(cudaMalloc(&out, n * 4));
        CHECK(cudaMalloc(&ref, n * 4));
        std::vector<float> h(n);
        for (int64_t i = 0; i < n; ++i) h[i] = (float)(i % 1000003);
        CHECK(cudaMemcpy(in, h.data(), n * 4, cudaMemcpyHostToDevice));
        const double gb = 2.0 * n * 4 / 1e9;
        const float copy = time_ms([&] { CHECK(cudaMemcpyAsync(out, in, n * 4, cudaMemcpyDeviceToDevice)); }, flush, flush_bytes);
        printf("[%lld, %lld, %lld]  copy %.3f ms %.0f GB/s\n", (long long)N, (long long)C, (long long)S, copy, gb / copy * 1e3);
        for (int dir = 0; dir < 2; ++dir) {
            const bool to_nhwc = dir == 0;
            // reference with the scalar 8-per-thread kernel, checked on the host
            std::vector<float> got(n);
            auto verify = [&](const char* name, float ms) {
                CHECK(cudaMemcpy(got.data(), out, n * 4, cudaMemcpyDeviceToHost));
                int64_t bad = 0;
                for (int64_t nn = 0; nn < N; ++nn)
                    for (int64_t c = 0; c < C; ++c)
                        for (int64_t s = 0; s < S; s += 7) {
                            const int64_t src = to_nhwc ? (nn * C + c) * S + s : (nn * S + s) * C + c;
                            const int64_t dst = to_nhwc ? (nn * S + s) * C + c : (nn * C + c) * S + s;
                            bad += got[dst] != h[src];
                        }
                printf("  %s %-14s %.3f ms %5.0f GB/s %s\n", to_nhwc ? "to_nhwc" : "to_nchw", name, ms, gb / ms * 1e3,
                       bad ? "WRONG" : "ok");
                CHECK(cudaMemset(out, 0, n * 4));
            };
#define RUN_SCALAR(EPT)                                                                                    \
    {                                                                                                      \
        const Geo g = geo(N, C, S, 256 * EPT);                                                             \
        const int blocks = (int)std::min<int64_t>(g.count, (int64_t)sms * 8);                              \
        auto launch = [&] {                                                                                \
            if (to_nhwc) scalar_kernel<true, EPT><<<blocks, 256>>>(in, out, g);                            \
            else scalar_kernel<false, EPT><<<blocks, 256>>>(in, out, g);                                   \
        };                                                                                                 \
        const float ms = time_ms(launch, flush, flush_bytes);                                              \
        launch();                                                                                          \
        CHECK(cudaDeviceSynchronize());                                                                    \
        verify("scalar" #EPT, ms);                                                                         \
    }
#define RUN_VECTOR(QPT, BPS)                                                                               \
    if (C % 4 == 0 && S % 4 == 0) {                                                                        \
        const Geo g = geo(N, C, S, 1024 * QPT);                                                            \
        const int blocks = (int)(BPS ? std::min<int64_t>(g.count, (int64_t)sms * BPS) : g.count);         \
        auto launch = [&] {                                                                                \
            if (to_nhwc) vector_kernel<true, QPT><<<blocks, 256>>>(in, out, g);                            \
            else vector_kernel<false, QPT><<<blocks, 256>>>(in, out, g);                                   \
        };                                                                                                 \
        const float ms = time_ms(launch, flush, flush_bytes);                                              \
        launch();                                                                                          \
        CHECK(cudaDeviceSynchronize());                                                                    \
        verify("vector" #QPT "x" #BPS, ms);                                                                \
    }
            RUN_SCALAR(8)
            RUN_SCALAR(16)
            RUN_VECTOR(2, 8)
            RUN_VECTOR(4, 8)
            RUN_VECTOR(4, 4)
            RUN_VECTOR(1, 8)
            RUN_VECTOR(1, 0)
            RUN_VECTOR(2, 0)
            RUN_VECTOR(4, 0)
            if (!to_nhwc && C % 4 == 0 && S % 4 == 0) {
                for (int qpt : {1, 2, -1, -2}) {  // negative: one tile per block (grid = tiles)
                    const Geo g = geo(N, C, S, 1024 * std::abs(qpt));
                    const int blocks = (int)(qpt > 0 ? std::min<int64_t>(g.count, (int64_t)sms * 8) : g.count);
                    auto launch = [&] {
                        if (std::abs(qpt) == 1) vector_rows_kernel<1><<<blocks, 256>>>(in, out, g);
                        else vector_rows_kernel<2><<<blocks, 256>>>(in, out, g);
                    };
                    const float ms = time_ms(launch, flush, flush_bytes);
                    launch();
                    CHECK(cudaDeviceSynchronize());
                    verify(qpt == 1 ? "rows1x8" : qpt == 2 ? "rows2x8" : qpt == -1 ? "rows1x0" : "rows2x0", ms);
                }
                // the persistent grid with the next tile's loads in flight (blocks per SM), then the same with the
                // epilogue tanh(x + b[c]) * 0.5, against one tile per block with it (x0: the product's shape of work)
                for (int bps : {4, 6, 8}) {
                    const Geo g = geo(N, C, S, 2048);
                    const int blocks = (int)std::min<int64_t>(g.count, (int64_t)sms * bps);
                    auto launch = [&] { prefetch_rows_kernel<2, false><<<blocks, 256>>>(in, out, nullptr, g); };
                    const float ms = time_ms(launch, flush, flush_bytes);
                    launch();
                    CHECK(cudaDeviceSynchronize());
                    char name[32];
                    snprintf(name, sizeof(name), "prefetch2x%d", bps);
                    verify(name, ms);
                }
                float* bias;
                CHECK(cudaMalloc(&bias, C * 4));
                CHECK(cudaMemset(bias, 0, C * 4));
                for (int bps : {0, 6, 8}) {
                    const Geo g = geo(N, C, S, 2048);
                    const int blocks = (int)(bps ? std::min<int64_t>(g.count, (int64_t)sms * bps) : g.count);
                    auto launch = [&] { prefetch_rows_kernel<2, true><<<blocks, 256>>>(in, out, bias, g); };
                    const float ms = time_ms(launch, flush, flush_bytes);
                    // the epilogue's values are not the input's: timed only (the layout is prefetch2x's, checked above)
                    printf("  to_nchw epilogue2x%d   %.3f ms %5.0f GB/s (timed only)\n", bps, ms, gb / ms * 1e3);
                }
                CHECK(cudaFree(bias));
            }
        }
        CHECK(cudaFree(in));
        CHECK(cudaFree(out));
        CHECK(cudaFree(ref));
    }
    return 0;
}
