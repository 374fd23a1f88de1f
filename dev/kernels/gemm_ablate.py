"""Where variant 2 (warp-specialised wgmma) of gemm_3xtf32.cu spends its time: time copies of the kernel with one
stage removed, for a GPU session.

    python3 dev/kernels/gemm_ablate.py --out $OUT/ablate.json            # every experiment, headline shape
    python3 dev/kernels/gemm_ablate.py --only baseline,no_b_split        # some of them
    python3 dev/kernels/gemm_ablate.py --build-only                      # patch and compile (no GPU)
    python3 dev/kernels/gemm_ablate.py --only baseline --extra old=OLD.cu --cases attention,batched

Each experiment is a list of exact text replacements applied to a copy of gemm_3xtf32.cu (the file itself is
never changed; a replacement whose text is missing fails the run, so a stale experiment cannot silently time
the unpatched kernel); --extra NAME=PATH adds another kernel file as it is (an earlier version, for reference).
All copies are compiled in parallel, then each is timed on the headline case (1024x8192x8192, A.B^T; --cases
adds bench_gemm cases by name) with bench_gemm's timing (L2 flushed, median of --reps) and checked against
float64, and the error of C's column means is measured on a Linear layer's operands (column_mean_errors: what
train-mode BatchNorm's running mean sees), in units of cuBLAS SGEMM's.
"Ablations" leave work out and give wrong results: only their time means something. "Candidates" are
changes that could be kept; their error says whether they may be.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import bench_gemm as bg

# The experiments below are text patches of gemm_3xtf32.cu as it is now (variant 2: a fresh accumulator every
# kWsTilesPerFlush k-tiles, small-part products first; A big rounded, A small raw; B tile = B_big, B small
# rounded). Earlier rounds patched earlier versions: bench/results/2026-11-22_gemm_h100_b1f684f has their numbers.
NO_B_SPLIT = [("for (int c = stid; c < 1024; c += kWsSplitterThreads) {  // 8 lanes",
               "for (int c = stid; c < 0; c += kWsSplitterThreads) {  // 8 lanes")]
NO_A_SPLIT = [("for (int e = 0; e < 4; ++e) split_tf32(__uint_as_float(a[e]), a_big[h][kk][e], a_small[h][kk][e]);",
               "for (int e = 0; e < 4; ++e) a_big[h][kk][e] = a_small[h][kk][e] = a[e];")]
NO_FLUSH = [("      for (int i = 0; i < 64; ++i) acc[i] += tile[i];\n    }\n\n    // Epilogue from the accumulator",
             "      if (kt + kWsTilesPerFlush >= k_tiles_padded)\n"
             "        for (int i = 0; i < 64; ++i) acc[i] += tile[i];\n    }\n\n    // Epilogue from the accumulator")]
NO_LOADS = [
    ("          ws_load_kmajor<kVec>(sa, a_batch, lda, out.m0, M, k0, K, ptid);\n", ""),
    ("            ws_load_kmajor<kVec>(sb, b_batch, ldb, out.n0, N, k0, K, ptid);\n", ""),
    ("            mbar_arrive_expect_tx(loaded_bar + 8 * s, 2 * kWgTileBytes);\n"
     "            tma_load_3d(sa, &tma_a, it * kBK, out.m0, out.batch, loaded_bar + 8 * s);\n"
     "            tma_load_3d(sa + kWgTileBytes, &tma_b, it * kBK, out.n0, out.batch, loaded_bar + 8 * s);\n",
     "            mbar_arrive(loaded_bar + 8 * s);\n"),
]
# Each k-step's three products in a row (a_small.b_big, a_big.b_small, a_big.b_big), tile after tile: the order
# before the small-first one. More wgmmas truncate a large running sum (gemm_scale_batchnorm's running mean).
INTERLEAVED = [
    ("          wgmma_m64n128k8_rs(tile, a_big[h][kk], wg_desc(b_small + off), 1);\n        }\n      }\n",
     "          wgmma_m64n128k8_rs(tile, a_big[h][kk], wg_desc(b_small + off), 1);\n"
     "          wgmma_m64n128k8_rs(tile, a_big[h][kk], wg_desc(b_big[h] + off), 1);\n        }\n"
     "        wgmma_commit();\n      }\n"),
    ("        for (int kk = 0; kk < kBK / 8; ++kk) wgmma_m64n128k8_rs(tile, a_big[h][kk], wg_desc(b_big[h] + kk * 32), 1);\n"
     "        wgmma_commit();\n", ""),
]


# The loads as cp.async by loader warps 8, 9 (every k-major tile went this way before TMA).
CP_ASYNC_LOADS = [("#define GEMM3X_WS_TMA 1 ", "#define GEMM3X_WS_TMA 0 ")]
# Two splitter warps in one producer warpgroup (384 threads, producers 72 registers), as before e5e8b3d.
TWO_SPLITTERS = [("#define GEMM3X_WS_PRODUCER_WARPGROUPS 2\n", "#define GEMM3X_WS_PRODUCER_WARPGROUPS 1\n")]
# Epilogue in two passes: every value of the thread's fragment first (all the epilogue's loads issue before any
# store, whatever the compiler knows about aliasing), then the stores.
EPILOGUE_TWO_PASS = [(
    "    float* c_batch = C + out.batch * stride_c;\n"
    "    const int row_base = out.m0 + 64 * cw + 16 * q + (lane >> 2);\n"
    "    const int col_base = out.n0 + 2 * (lane & 3);\n",
    "    float* c_batch = C + out.batch * stride_c;\n"
    "    const int row_base = out.m0 + 64 * cw + 16 * q + (lane >> 2);\n"
    "    const int col_base = out.n0 + 2 * (lane & 3);\n"
    "#pragma unroll\n"
    "    for (int j = 0; j < 16; ++j)\n"
    "#pragma unroll\n"
    "      for (int e = 0; e < 4; ++e) {\n"
    "        const int row = row_base + (e >> 1) * 8;\n"
    "        const int col = col_base + j * 8 + (e & 1);\n"
    "        if (row < M && col < N) acc[4 * j + e] = epi(acc[4 * j + e], out.batch, row, col);\n"
    "      }\n"), (
    "        const float v0 = epi(acc[4 * j + e], out.batch, row, col);\n",
    "        const float v0 = acc[4 * j + e];\n"), (
    "          const float v1 = epi(acc[4 * j + e + 1], out.batch, row, col + 1);\n",
    "          const float v1 = acc[4 * j + e + 1];\n")]
# Consumer warpgroup 1 starts its first flush once warpgroup 0's first commit group (20 of the flush's 24 wgmmas)
# has completed: from then on the two run out of phase, so one's flush (wait, adds, next A split) and its tile's
# stores overlap the other's wgmmas instead of both leaving the tensor cores idle at once.
STAGGER = [(
    "        wgmma_wait_pending(kWsTilesPerFlush - 1 - h);  // tile h's group has completed\n",
    "        wgmma_wait_pending(kWsTilesPerFlush - 1 - h);  // tile h's group has completed\n"
    "        if (h == 0 && cw == 0 && stagger) { asm volatile(\"bar.arrive 1, 256;\\n\" ::: \"memory\"); stagger = false; }\n"), (
    "      uint32_t b_big[kWsTilesPerFlush];\n",
    "      uint32_t b_big[kWsTilesPerFlush];\n"
    "      if (cw == 1 && stagger) { asm volatile(\"bar.sync 1, 256;\\n\" ::: \"memory\"); stagger = false; }\n"), (
    "  uint32_t phase = 0;\n#pragma unroll 1\n  for (int t = static_cast<int>(blockIdx.x); t < tiles;",
    "  uint32_t phase = 0;\n  bool stagger = true;\n#pragma unroll 1\n  for (int t = static_cast<int>(blockIdx.x); t < tiles;")]


# Timeline of block 0 (clock64 of its multiprocessor) at each step of a k-tile's way through the ring (TMA
# loads), read back by gemm3x_trace_read after one more headline launch (trace_summary): 0 loader passes empty,
# 1 loader's two boxes issued, 2 splitter passes loaded, 3 splitter arrives on full, 4/5 consumer warpgroup 0
# before/after its wait on full, 6/7 warpgroup 0/1 release the slot. Each event costs a few instructions.
TRACE_DEFS = """__device__ unsigned long long g_ff_trace[8][2048];
__device__ __forceinline__ void ff_trace(int ev, int j) {
  if (blockIdx.x == 0 && j < 2048) {
    unsigned long long c;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
    g_ff_trace[ev][j] = c;
  }
}

template <bool kBKMajor, int kVec, class Epilogue>
__global__ void __launch_bounds__(kWsThreads, 1)
    gemm3x_ws_kernel("""
TRACE = [
    ("template <bool kBKMajor, int kVec, class Epilogue>\n__global__ void __launch_bounds__(kWsThreads, 1)\n"
     "    gemm3x_ws_kernel(", TRACE_DEFS),
    ("      if (ptid == 0) {\n        uint32_t s = 0;\n", "      if (ptid == 0) {\n        int tj = 0;\n        uint32_t s = 0;\n"),
    ("            mbar_wait(empty_bar + 8 * s, phase ^ 1u);  // passes at once on each slot's first use\n",
     "            mbar_wait(empty_bar + 8 * s, phase ^ 1u);  // passes at once on each slot's first use\n"
     "            ff_trace(0, tj);\n"),
    ("            tma_load_3d(sa + kWgTileBytes, &tma_b, it * kBK, out.n0, out.batch, loaded_bar + 8 * s);\n",
     "            tma_load_3d(sa + kWgTileBytes, &tma_b, it * kBK, out.n0, out.batch, loaded_bar + 8 * s);\n"
     "            ff_trace(1, tj++);\n"),
    ("        mbar_wait(loaded_bar + 8 * s, phase);\n",
     "        mbar_wait(loaded_bar + 8 * s, phase);\n        if (stid == 0) ff_trace(2, j);\n"),
    ("        mbar_arrive(full_bar + 8 * s);\n",
     "        if (stid == 0) ff_trace(3, j);\n        mbar_arrive(full_bar + 8 * s);\n"),
    ("  uint32_t phase = 0;\n#pragma unroll 1\n", "  uint32_t phase = 0;\n  int tj = 0;\n#pragma unroll 1\n"),
    ("        mbar_wait(full_bar + 8 * (s + h), phase);\n",
     "        if (ctid == 0 && cw == 0) ff_trace(4, tj + h);\n        mbar_wait(full_bar + 8 * (s + h), phase);\n"
     "        if (ctid == 0 && cw == 0) ff_trace(5, tj + h);\n"),
    ("        if (lane == 0) mbar_arrive(empty_bar + 8 * (s + h));",
     "        if (ctid == 0) ff_trace(6 + cw, tj + h);\n        if (lane == 0) mbar_arrive(empty_bar + 8 * (s + h));"),
    ("      s += kWsTilesPerFlush;\n", "      s += kWsTilesPerFlush;\n      tj += kWsTilesPerFlush;\n"),
    ("// Epilogue example: C = sigmoid",
     "extern \"C\" int gemm3x_trace_read(unsigned long long* host) {\n"
     "  return static_cast<int>(cudaMemcpyFromSymbol(host, gemm3x::g_ff_trace, sizeof(gemm3x::g_ff_trace)));\n}\n\n"
     "// Epilogue example: C = sigmoid"),
]


def trace_summary(torch, lib) -> dict:
    """One more headline launch, then block 0's timeline: medians over its k-tiles, in cycles."""
    import ctypes
    import statistics

    case = bg.CASES[0]
    ops = bg.Operands(torch, case)
    stream = torch.cuda.current_stream().cuda_stream
    if bg.launch_ours(lib, ops, case, stream) != 0:
        return {"error": "launch failed"}
    torch.cuda.synchronize()
    buf = (ctypes.c_ulonglong * (8 * 2048))()
    if lib.gemm3x_trace_read(buf) != 0:
        return {"error": "trace read failed"}
    ev = [[buf[e * 2048 + j] for j in range(2048)] for e in range(8)]
    n = max(j for j in range(2048) if all(ev[e][j] for e in range(8))) + 1
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    span = ev[5][n - 1] - ev[4][0]
    out = {
        "k_tiles": n,
        "cycles_per_k_tile": span / max(n - 1, 1),
        "consumer_wait_on_full_share": sum(ev[5][j] - ev[4][j] for j in range(n)) / span,
        "load_issue": med([ev[1][j] - ev[0][j] for j in range(n)]),
        "issued_to_loaded_seen": med([ev[2][j] - ev[1][j] for j in range(n)]),
        "split": med([ev[3][j] - ev[2][j] for j in range(n)]),
        "full_to_consumer_asks": med([ev[4][j] - ev[3][j] for j in range(n)]),
        "consumer_wait": med([ev[5][j] - ev[4][j] for j in range(n)]),
        "consumer_has_to_release_wg0": med([ev[6][j] - ev[5][j] for j in range(n)]),
        "release_wg1_minus_wg0": med([ev[7][j] - ev[6][j] for j in range(n)]),
        "release_to_reissue": med([ev[0][j] - max(ev[6][j - 4], ev[7][j - 4]) for j in range(4, n)]),
    }
    out["raw_first_64"] = [[ev[e][j] - ev[0][0] for e in range(8)] for j in range(min(n, 64))]
    return out


def _set(name: str, old: int, new: int) -> list[tuple[str, str]]:
    return [(f"constexpr int {name} = {old};", f"constexpr int {name} = {new};")]


FLUSH_EVERY_TILE = _set("kWsTilesPerFlush", 2, 1)

# (name, kind, replacements): kind "ablation" (time only) or "candidate" (time and error both count)
EXPERIMENTS: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("baseline", "candidate", []),
    ("interleaved", "candidate", INTERLEAVED),
    ("flush_every_tile", "candidate", FLUSH_EVERY_TILE),
    ("flush_every_tile_interleaved", "candidate", FLUSH_EVERY_TILE + INTERLEAVED),
    ("no_b_split", "ablation", NO_B_SPLIT),
    ("no_a_split", "ablation", NO_A_SPLIT),
    ("no_flush", "ablation", NO_FLUSH),
    ("no_loads", "ablation", NO_LOADS),
    ("cp_async_loads", "candidate", CP_ASYNC_LOADS),
    ("two_splitters", "candidate", TWO_SPLITTERS),
    ("epilogue_two_pass", "candidate", EPILOGUE_TWO_PASS),
    ("stagger", "candidate", STAGGER),
    ("stagger_two_pass", "candidate", STAGGER + EPILOGUE_TWO_PASS),
    ("no_loads_no_b_split", "ablation", NO_LOADS + NO_B_SPLIT),
    ("no_a_split_no_flush", "ablation", NO_A_SPLIT + NO_FLUSH),
    ("trace", "ablation", TRACE),
    ("tensor_cores_only", "ablation", NO_LOADS + NO_B_SPLIT + NO_A_SPLIT + NO_FLUSH),
    ("tensor_cores_only_stagger", "ablation", NO_LOADS + NO_B_SPLIT + NO_A_SPLIT + NO_FLUSH + STAGGER),
]


def patched_source(replacements: list[tuple[str, str]]) -> str:
    text = bg.SOURCE.read_text()
    for old, new in replacements:
        count = text.count(old)
        if count != 1:
            sys.exit(f"experiment text found {count} times (expected once): {old[:80]!r}")
        text = text.replace(old, new)
    return text


def build_one(build_dir: Path, name: str, replacements) -> tuple[str, Path, str]:
    """replacements: text patches of the kernel file, or the Path of another kernel file to build as it is."""
    src = build_dir / f"{name}.cu"
    src.write_text(replacements.read_text() if isinstance(replacements, Path) else patched_source(replacements))
    lib, log = bg.build(build_dir, 3, source=src, tag=name)
    return name, lib, log


def column_mean_errors(torch, lib, m: int = 1024, n: int = 8192, k: int = 8192) -> dict:
    """Error of the column means of C = A.B^T vs float64, ours and cuBLAS SGEMM's, on the operands of a Linear
    layer followed by train-mode BatchNorm (A = torch.rand: every row has the same positive mean, B = nn.Linear's
    uniform init): BatchNorm's batch mean (and so its running mean) averages the random part of each element's
    error away over the rows, and keeps what every row shares (a bias toward zero of the accumulation, or
    the error of B's split). rms over columns of the mean over rows, in float64 ("f64_mean") and as BatchNorm
    takes it, in float32 ("f32_mean")."""
    g = torch.Generator(device=bg.DEVICE).manual_seed(1)
    a = torch.rand(m, k, device=bg.DEVICE, generator=g)
    bound = k ** -0.5
    b = (torch.rand(n, k, device=bg.DEVICE, generator=g) * 2 - 1) * bound
    c = torch.full((m, n), float("nan"), device=bg.DEVICE)
    stream = torch.cuda.current_stream().cuda_stream
    rc = lib.gemm3x_tn(a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k, k, k, n, None, stream)
    if rc != 0:
        return {"error": f"launch returned cudaError {rc}"}
    bg.set_tf32(torch, False)
    sgemm = a @ b.T
    truth = (a.double() @ b.double().T).mean(0)
    out = {}
    for label, res in (("ours", c), ("sgemm", sgemm)):
        out[label] = {"f64_mean": (res.double().mean(0) - truth).square().mean().sqrt().item(),
                      "f32_mean": (res.mean(0).double() - truth).square().mean().sqrt().item()}
    out["ratio_f64_mean"] = out["ours"]["f64_mean"] / out["sgemm"]["f64_mean"]
    out["ratio_f32_mean"] = out["ours"]["f32_mean"] / out["sgemm"]["f32_mean"]
    return out


def cases_of(args) -> list:
    """The headline case, then the bench cases whose name contains one of --cases' comma-separated texts."""
    texts = [t for t in args.cases.split(",") if t]
    return [bg.CASES[0]] + [c for c in bg.CASES[1:] if any(t in c.name for t in texts)]


def time_one(args) -> int:
    import torch

    lib = bg.load(args.time_one)
    lib.gemm3x_set_variant(bg.VARIANTS["ws"])
    flush = torch.empty(256 * 1024 * 1024 // 4, device="cuda")
    rows = [bg.run_case(torch, lib, case, flush, args) for case in cases_of(args)]
    row = rows[0]
    row["more_cases"] = rows[1:]
    row["column_mean"] = column_mean_errors(torch, lib)
    if hasattr(lib, "gemm3x_trace_read"):
        row["trace"] = trace_summary(torch, lib)
    args.out.write_text(json.dumps(row))
    return 0


def _colmean(row: dict) -> str:
    cm = row.get("column_mean", {})
    if "ours" not in cm:
        return cm.get("error", "-")
    return (f"{cm['ours']['f64_mean']:.2e} = {cm['ratio_f64_mean']:.2f}x sgemm's "
            f"(f32 mean {cm['ratio_f32_mean']:.2f}x)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", default="", help="comma-separated experiment names")
    parser.add_argument("--reps", type=int, default=25)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--build-dir", type=Path, default=Path("/tmp/gemm_ablate"))
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--cases", default="", help="also time the bench cases whose name contains one of these "
                        "comma-separated texts (the headline always runs)")
    parser.add_argument("--extra", action="append", default=[], metavar="NAME=PATH",
                        help="also time another kernel file as it is (e.g. an earlier version, for reference)")
    parser.add_argument("--time-one", type=Path, help="(internal) time this library's variant 2, write --out")
    args = parser.parse_args()
    if args.time_one:
        return time_one(args)
    wanted = {w for w in args.only.split(",") if w}
    experiments = [e for e in EXPERIMENTS if not wanted or e[0] in wanted]
    for spec in args.extra:
        name, _, path = spec.partition("=")
        if not Path(path).is_file():
            sys.exit(f"--extra {spec}: no such file")
        experiments.append((name, "reference", Path(path)))
    args.build_dir.mkdir(parents=True, exist_ok=True)

    with ThreadPoolExecutor(max_workers=len(experiments)) as pool:
        built = list(pool.map(lambda e: build_one(args.build_dir, e[0], e[2]), experiments))
    for name, _, log in built:
        regs = sorted({line.split("Used ")[1].split(" registers")[0] for line in log.splitlines() if "Used " in line})
        print(f"built {name}: registers seen {', '.join(regs)}")
    if args.build_only:
        return 0

    # Each library in its own process: the kernels' once-per-device setup lives in inline-function statics,
    # which the dynamic linker merges across libraries loaded into one process.
    rows = []
    for (name, kind, _), (_, lib_path, _) in zip(experiments, built):
        out = args.build_dir / f"{name}.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--time-one", str(lib_path), "--out", str(out),
               "--reps", str(args.reps), "--warmup", str(args.warmup), "--cases", args.cases]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        row = json.loads(out.read_text()) if proc.returncode == 0 and out.exists() else {
            "error": f"exit {proc.returncode}: {proc.stderr.strip()[-400:]}"}
        row.update(experiment=name, kind=kind)
        rows.append(row)
        if "error" in row:
            print(f"{name:<18} {kind:<9} failed: {row['error']}", flush=True)
            continue
        print(f"{name:<28} {kind:<9} {row['tflops']['ours']:7.1f} TFLOP/s  {row['ms']['ours']:.3f} ms  "
              f"err {row['rel_err_vs_fp64']['ours']:.2e} (sgemm {row['rel_err_vs_fp64']['sgemm']:.2e})  "
              f"column-mean err {_colmean(row)}", flush=True)
        for more in row["more_cases"]:
            ok = more.get("ok") and "ms" in more
            print(f"    {more['case']['name']}: " + (f"{more['ms']['ours']:.3f} ms ({more['tflops']['ours']:.1f} TFLOP/s), "
                  f"sgemm {more['ms']['sgemm']:.3f} ms, err {more['rel_err_vs_fp64']['ours']:.2e}" if ok
                  else f"FAILED {more.get('error', '(wrong result)')}"), flush=True)
    base = rows[0]["ms"]["ours"] if rows and "ms" in rows[0] and rows[0]["experiment"] == "baseline" else None
    print(f"\n{'experiment':<28} {'kind':<9} {'ms':>7} {'TFLOP/s':>8} {'saves':>7} {'err':>9}  column-mean err")
    for r in rows:
        if "error" in r:
            print(f"{r['experiment']:<28} {r['kind']:<9} failed: {r['error']}")
            continue
        saves = f"{100 * (1 - r['ms']['ours'] / base):6.1f}%" if base else ""
        print(f"{r['experiment']:<28} {r['kind']:<9} {r['ms']['ours']:7.3f} {r['tflops']['ours']:8.1f} {saves:>7} "
              f"{r['rel_err_vs_fp64']['ours']:9.2e}  {_colmean(r)}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"case": bg.CASES[0].name, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
