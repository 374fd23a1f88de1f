"""Where the time goes in "sum of a linear layer's outputs" = x·(Σ_j W_j)ᵀ (issue #4), for a GPU session.

    python3 dev/kernels/bench_reduce_weight.py --out $OUT/reduce_weight.json

The rewrite turns sum_j (x·Wᵀ)_j into a column sum of W (reads all of W: 268 MB at 8192x8192 fp32) and a
matrix-vector product with x (reads x: 32 MB at 1024x8192). This times, with CUDA events (median of --reps,
L2 flushed before each run), each way of doing the two steps, alone and chained, plus plain reads of the
same bytes as the floor, and checks every chain against float64. Builds colsum.cu-style kernels inline
with nvcc (ctypes, no torch extension).
"""

from __future__ import annotations

import argparse
import ctypes
import json
from pathlib import Path

import torch
from labtools import nvcc_library, timed

SOURCE = r"""
#include <cuda_runtime.h>
// partial[c][j] = sum over rows r in chunk c of W[r][j]; 4 columns per thread (float4), rows in order.
__global__ void colsum_partial(const float* __restrict__ W, float* __restrict__ partial, int rows, int cols,
                               int rows_per_chunk) {
    int j = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    int r0 = blockIdx.y * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
    if (j >= cols) return;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int r = r0; r < r1; ++r) {
        float4 v = __ldg(reinterpret_cast<const float4*>(W + (size_t)r * cols + j));
        acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    }
    *reinterpret_cast<float4*>(partial + (size_t)blockIdx.y * cols + j) = acc;
}
// u[j] = scale * sum_c partial[c][j], chunks in order (deterministic).
__global__ void colsum_finish(const float* __restrict__ partial, float* __restrict__ u, int chunks, int cols,
                              float scale) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    float s = 0.f;
    for (int c = 0; c < chunks; ++c) s += partial[(size_t)c * cols + j];
    u[j] = scale * s;
}
// y[i] = scale * dot(x[i, :], u); one warp per row, float4 loads.
__global__ void gemv_rows(const float* __restrict__ x, const float* __restrict__ u, float* __restrict__ y,
                          int rows, int cols, float scale) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= rows) return;
    const float4* xr = reinterpret_cast<const float4*>(x + (size_t)warp * cols);
    const float4* u4 = reinterpret_cast<const float4*>(u);
    float s = 0.f;
    for (int k = lane; k < cols / 4; k += 32) {
        float4 a = __ldg(xr + k), b = __ldg(u4 + k);
        s += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) y[warp] = scale * s;
}
extern "C" int colsum(const float* W, float* partial, float* u, int rows, int cols, int chunks, float scale,
                      void* stream) {
    cudaStream_t s = (cudaStream_t)stream;
    int per = (rows + chunks - 1) / chunks;
    dim3 grid((cols / 4 + 255) / 256, chunks);
    colsum_partial<<<grid, 256, 0, s>>>(W, partial, rows, cols, per);
    colsum_finish<<<(cols + 255) / 256, 256, 0, s>>>(partial, u, chunks, cols, scale);
    return (int)cudaGetLastError();
}
extern "C" int gemv(const float* x, const float* u, float* y, int rows, int cols, float scale, void* stream) {
    gemv_rows<<<(rows * 32 + 255) / 256, 256, 0, (cudaStream_t)stream>>>(x, u, y, rows, cols, scale);
    return (int)cudaGetLastError();
}
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--features", type=int, default=8192)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    lib = nvcc_library(SOURCE, "colsum")
    B, K = args.batch, args.features
    N = K
    torch.manual_seed(0)
    x = torch.rand(B, K, device="cuda")
    W = torch.randn(N, K, device="cuda")
    truth = (x.double() @ W.double().sum(0)).unsqueeze(1) / 2 * 1.5
    flush = torch.empty(64 << 20, dtype=torch.int8, device="cuda")
    stream = lambda: ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)  # noqa: E731
    u = torch.empty(K, device="cuda")
    y = torch.empty(B, 1, device="cuda")
    partials = {c: torch.empty(c, K, device="cuda") for c in (32, 64, 128, 256)}

    def ours(chunks: int, scale: float = 1.0):
        def run():
            lib.colsum(
                ctypes.c_void_p(W.data_ptr()),
                ctypes.c_void_p(partials[chunks].data_ptr()),
                ctypes.c_void_p(u.data_ptr()),
                N,
                K,
                chunks,
                ctypes.c_float(scale),
                stream(),
            )

        return run

    def our_gemv(scale: float = 1.0):
        def run():
            lib.gemv(
                ctypes.c_void_p(x.data_ptr()),
                ctypes.c_void_p(u.data_ptr()),
                ctypes.c_void_p(y.data_ptr()),
                B,
                K,
                ctypes.c_float(scale),
                stream(),
            )

        return run

    s_keep = W.sum(0, keepdim=True)
    cases = {
        "eager model (x@W.T /2, sum, *1.5)": lambda: (torch.matmul(x, W.T) / 2).sum(1, keepdim=True) * 1.5,
        "read floor: W.sum() (all of W)": lambda: W.sum(),
        "read floor: x.sum() (all of x)": lambda: x.sum(),
        "W.sum(0, keepdim)": lambda: W.sum(0, keepdim=True),
        "ones@W (cuBLAS)": lambda: torch.ones(1, N, device="cuda") @ W,
        "linear(x, s[1,K])": lambda: torch.nn.functional.linear(x, s_keep),
        "mv(x, s[K])": lambda: torch.mv(x, s_keep[0]),
        "our gemv": our_gemv(),
        "current: sum0 + linear + div,mul": lambda: (
            torch.nn.functional.linear(x, W.sum(0, keepdim=True)) / 2 * 1.5
        ),
        "sum0 + mv + unsqueeze,mul": lambda: torch.mv(x, W.sum(0)).unsqueeze(1) * 0.75,
    }
    for c in partials:
        cases[f"our colsum chunks={c}"] = ours(c)
    gemv_plain = our_gemv()

    def chained(chunks: int, with_ours: bool):
        colsum = ours(chunks, 0.75)
        return lambda: (colsum(), gemv_plain() if with_ours else torch.mv(x, u, out=y[:, 0]))

    for c in partials:
        cases[f"our colsum(scale 0.75) chunks={c} + our gemv"] = chained(c, True)
        cases[f"our colsum(scale 0.75) chunks={c} + mv"] = chained(c, False)
    results = []
    for name, fn in cases.items():
        ms = timed(fn, args.reps, flush)
        err = None
        if name.startswith(("current", "sum0", "our colsum(")):
            fn()
            torch.cuda.synchronize()
            got = fn()
            got = y if got is None or isinstance(got, tuple) else got
            err = ((got.double().reshape(-1) - truth.reshape(-1)).norm() / truth.norm()).item()
        results.append({"case": name, "ms": ms, "rel_err_vs_fp64": err})
    eager = (torch.matmul(x, W.T) / 2).sum(1, keepdim=True) * 1.5
    eager_err = ((eager.double() - truth).norm() / truth.norm()).item()
    print(f"{'case':55s} {'ms':>8s} {'GB/s(W+x)':>10s}  err vs fp64 (eager {eager_err:.1e})")
    for r in results:
        gbs = (N * K + B * K) * 4 / (r["ms"] * 1e6)
        err = "" if r["rel_err_vs_fp64"] is None else f"{r['rel_err_vs_fp64']:.1e}"
        print(f"{r['case']:55s} {r['ms']:8.4f} {gbs:10.0f}  {err}")
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "gpu": torch.cuda.get_device_name(),
                    "torch": torch.__version__,
                    "batch": B,
                    "features": K,
                    "eager_err": eager_err,
                    "results": results,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
