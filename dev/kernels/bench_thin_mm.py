"""How fast cuBLAS runs a thin matrix product, and whether a kernel of our own reads A faster (GPU machine).

    .venv/bin/python dev/kernels/bench_thin_mm.py --out $OUT/thin_mm.json

out[M, N] = A[M, K] @ B[K, N] with N of 1 to 16: the pooling matrices that the conv-pool rewrite builds (a
global mean after a convolution becomes A = the input viewed [N*C*H, W] times a [W, taps] matrix) and linear
layers with few outputs. Such a product reads A once and does 2N FLOPs per element of A: it is a read of A,
and its floor is A's bytes over the bandwidth. This times, with CUDA events (median of --reps, L2 flushed
before each call), `torch.mm` (cuBLAS, fp32: TF32 off) with B contiguous and with B a transposed view (as
the rewrite passes it), a plain read of A (`A.sum()`), and `thin_mm` below, and gives each one's error vs
float64 and its GB/s on A's bytes. Builds the kernel with nvcc (ctypes, no torch extension).
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
// out[m][n] = sum_k A[m][k] * B[k][n] for n < N (N a template constant): one warp per row of A at a time
// (grid-stride over rows), each lane reads A's row in float4s at k = 4 * (lane + 32 i). B is staged in shared
// memory as [N][K] (B's strides are arbitrary), so a lane reads B[n][4q .. 4q+3] as one float4: consecutive
// lanes, consecutive float4s, no bank conflicts (the first version's [K][N] layout read 4N scalars per float4
// of A with 4-way conflicts: shared-memory-bound from N = 4 on). Each lane keeps N partial sums; a butterfly
// over the warp adds them (fixed order: deterministic). Needs K % 4 == 0 and A's rows 16-byte aligned.
template <int N>
__global__ void thin_mm(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ out,
                        int M, int K, long long b_k, long long b_n) {
    extern __shared__ __align__(16) float b_s[];  // [N][K]
    for (int i = threadIdx.x; i < K * N; i += blockDim.x) {
        const int n = i / K, k = i % K;
        b_s[i] = B[k * b_k + n * b_n];
    }
    __syncthreads();
    const int lane = threadIdx.x & 31;
    const int warps = (gridDim.x * blockDim.x) >> 5;
    for (int m = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; m < M; m += warps) {
        const float4* row = reinterpret_cast<const float4*>(A + (size_t)m * K);
        float acc[N];
#pragma unroll
        for (int n = 0; n < N; ++n) acc[n] = 0.0f;
#pragma unroll 4
        for (int q = lane; q < K / 4; q += 32) {  // unrolled: a row's loads are in flight together
            const float4 a = __ldcs(row + q);  // streamed: A is read once
#pragma unroll
            for (int n = 0; n < N; ++n) {
                const float4 b = reinterpret_cast<const float4*>(b_s + n * K)[q];
                acc[n] = fmaf(a.w, b.w, fmaf(a.z, b.z, fmaf(a.y, b.y, fmaf(a.x, b.x, acc[n]))));
            }
        }
#pragma unroll
        for (int n = 0; n < N; ++n)
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc[n] += __shfl_xor_sync(0xffffffffu, acc[n], o);
        if (lane < N) {
            float v = acc[0];
#pragma unroll
            for (int n = 1; n < N; ++n) v = lane == n ? acc[n] : v;
            out[(size_t)m * N + lane] = v;
        }
    }
}
template <int N>
int launch(const float* A, const float* B, float* out, int M, int K, long long b_k, long long b_n, int blocks,
           cudaStream_t s) {
    const size_t smem = sizeof(float) * K * N;
    if (smem > 48 * 1024) cudaFuncSetAttribute(thin_mm<N>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    thin_mm<N><<<blocks, 256, smem, s>>>(A, B, out, M, K, b_k, b_n);
    return (int)cudaGetLastError();
}
extern "C" int thin(const float* A, const float* B, float* out, int M, int K, int N, long long b_k, long long b_n,
                    int blocks, void* stream) {
    cudaStream_t s = (cudaStream_t)stream;
    switch (N) {
        case 1: return launch<1>(A, B, out, M, K, b_k, b_n, blocks, s);
        case 2: return launch<2>(A, B, out, M, K, b_k, b_n, blocks, s);
        case 3: return launch<3>(A, B, out, M, K, b_k, b_n, blocks, s);
        case 4: return launch<4>(A, B, out, M, K, b_k, b_n, blocks, s);
        case 8: return launch<8>(A, B, out, M, K, b_k, b_n, blocks, s);
        case 16: return launch<16>(A, B, out, M, K, b_k, b_n, blocks, s);
    }
    return -1;
}
"""

# (M, K, N): 42's pooling product (the input [16, 64, 512, 512] viewed [-1, 512], three taps), the same A with
# other N, 44's and a 8-channel model's ([*, 128] rows), a linear head, and a small one (host-bound).
SHAPES = [(524288, 512, n) for n in (1, 2, 3, 4, 8, 16)] + [
    (131072, 128, 3),
    (131072, 128, 1),
    (16384, 4096, 1),
    (16384, 4096, 4),
    (65536, 1024, 8),
    (3072, 512, 3),
]


def measure(lib: ctypes.CDLL, m: int, k: int, n: int, sms: int, reps: int, flush: torch.Tensor) -> list[dict]:
    torch.manual_seed(0)
    a = torch.rand(m, k, device="cuda")
    b = torch.rand(n, k, device="cuda").t()  # B as the rewrite passes it: a transposed view of [N, K]
    b_c = b.contiguous()
    truth = a.double() @ b.double()
    out = torch.empty(m, n, device="cuda")
    gb = m * k * 4 / 1e9

    def ours(blocks: int):
        def run():
            stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
            rc = lib.thin(
                ctypes.c_void_p(a.data_ptr()),
                ctypes.c_void_p(b.data_ptr()),
                ctypes.c_void_p(out.data_ptr()),
                m,
                k,
                n,
                ctypes.c_longlong(b.stride(0)),
                ctypes.c_longlong(b.stride(1)),
                blocks,
                stream,
            )
            if rc:
                raise RuntimeError(f"thin_mm launch failed: {rc}")
            return out

        return run

    cases = {
        "read floor: A.sum()": lambda: a.sum(),
        "torch.mm(A, B view)": lambda: torch.mm(a, b),
        "torch.mm(A, B contiguous)": lambda: torch.mm(a, b_c),
    }
    for per_sm in (4, 8, 16):
        cases[f"thin_mm {per_sm} blocks/SM"] = ours(per_sm * sms)
    rows = []
    for name, fn in cases.items():
        ms = timed(fn, reps, flush)
        err = None
        if not name.startswith("read"):
            got = fn()
            torch.cuda.synchronize()
            err = ((got.double() - truth).norm() / truth.norm()).item()
        rows.append(
            {"M": m, "K": k, "N": n, "case": name, "ms": ms, "gb_per_s": gb / (ms / 1e3), "rel_err": err}
        )
        print(
            f"M={m:7d} K={k:5d} N={n:2d}  {name:28s} {ms:8.4f} ms  {rows[-1]['gb_per_s']:7.0f} GB/s  "
            f"err {'-' if err is None else f'{err:.1e}'}",
            flush=True,
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    lib = nvcc_library(SOURCE, "thin_mm")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    results = []
    for m, k, n in SHAPES:
        results += measure(lib, m, k, n, sms, args.reps, flush)
    if args.out:
        args.out.write_text(
            json.dumps(
                {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "results": results},
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
