"""Where variant 2 (warp-specialised wgmma) of gemm_3xtf32.cu spends its time: time copies of the kernel with one
stage removed, for a GPU session.

    python3 dev/kernels/gemm_ablate.py --out $OUT/ablate.json            # every experiment, headline shape
    python3 dev/kernels/gemm_ablate.py --only baseline,no_b_split        # some of them
    python3 dev/kernels/gemm_ablate.py --build-only                      # patch and compile (no GPU)

Each experiment is a list of exact text replacements applied to a copy of gemm_3xtf32.cu (the file itself is
never changed; a replacement whose text is missing fails the run, so a stale experiment cannot silently time
the unpatched kernel). All copies are compiled in parallel, then each is timed on the headline case
(1024x8192x8192, A.B^T) with bench_gemm's timing (L2 flushed, median of --reps) and checked against float64.
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

# The experiments below are text patches of gemm_3xtf32.cu as it is now (per-tile flush, rounded split,
# ping-pong on issue). The round of 2026-11-22 patched later versions; bench/results/2026-11-22_gemm_h100_b1f684f
# has their numbers and dev/kernels/README.md what they changed.
NO_WGMMA = [  # one wgmma per k-tile instead of 12
    ("      wgmma_m64n128k8_rs(tile, a_small[kk], wg_desc(b_big + off), kk == 0 ? 0 : 1);\n"
     "      wgmma_m64n128k8_rs(tile, a_big[kk], wg_desc(b_small + off), 1);\n"
     "      wgmma_m64n128k8_rs(tile, a_big[kk], wg_desc(b_big + off), 1);\n",
     "      if (kk == 0) wgmma_m64n128k8_rs(tile, a_small[kk], wg_desc(b_big + off), 0);\n"),
]
NO_B_SPLIT = [("for (int i = 0; i < kWsChunksPerSplitter; ++i) {  // 8 lanes",
               "for (int i = 0; i < 0; ++i) {  // 8 lanes")]
NO_A_SPLIT = [("for (int e = 0; e < 4; ++e) split_tf32(__uint_as_float(a[e]), a_big[kk][e], a_small[kk][e]);",
               "for (int e = 0; e < 4; ++e) { a_big[kk][e] = a[e]; a_small[kk][e] = a[e]; }")]
NO_FLUSH = [
    ("    wgmma_wait0();\n    __syncwarp();\n    if (lane == 0) mbar_arrive(empty_bar + 8 * s);",
     "    wgmma_wait0();\n    __syncwarp();\n    if (lane == 0) mbar_arrive(empty_bar + 8 * s);\n"
     "    if (kt + 1 < k_tiles) { if (++s == kWsStages) { s = 0; phase ^= 1u; } continue; }"),
]
NO_LOADS = [
    ("        ws_load_kmajor<kVec>(sa, A, lda, m0, M, k0, K, ptid);\n", ""),
    ("          ws_load_kmajor<kVec>(sb, B, ldb, n0, N, k0, K, ptid);\n", ""),
]
NO_PINGPONG = [
    ("    named_bar_sync_if(cw == 0 ? kWsBarWg1Issued : kWsBarWg0Issued, 256, cw != 0 || kt > 0);\n", ""),
    ("    named_bar_arrive_if(cw == 0 ? kWsBarWg0Issued : kWsBarWg1Issued, 256, cw == 0 || kt + 1 < k_tiles);\n",
     ""),
]
# small = x - big left for the tensor core to truncate (the round's first gain: 91 -> 97 TFLOP/s, same error)
SMALL_UNROUNDED = [("small = to_tf32(x - __uint_as_float(big));", "small = __float_as_uint(x - __uint_as_float(big));")]

# (name, kind, replacements): kind "ablation" (time only) or "candidate" (time and error both count)
EXPERIMENTS: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("baseline", "candidate", []),
    ("small_unrounded", "candidate", SMALL_UNROUNDED),
    ("no_pingpong", "candidate", NO_PINGPONG),
    ("no_b_split", "ablation", NO_B_SPLIT),
    ("no_a_split", "ablation", NO_A_SPLIT),
    ("no_flush", "ablation", NO_FLUSH),
    ("no_loads", "ablation", NO_LOADS),
    ("no_wgmma", "ablation", NO_WGMMA),
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
    src = build_dir / f"{name}.cu"
    src.write_text(patched_source(replacements))
    lib, log = bg.build(build_dir, 3, source=src, tag=name)
    return name, lib, log


def time_one(args) -> int:
    import torch

    lib = bg.load(args.time_one)
    lib.gemm3x_set_variant(bg.VARIANTS["ws"])
    flush = torch.empty(256 * 1024 * 1024 // 4, device="cuda")
    row = bg.run_case(torch, lib, bg.CASES[0], flush, args)
    args.out.write_text(json.dumps(row))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", default="", help="comma-separated experiment names")
    parser.add_argument("--reps", type=int, default=25)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--build-dir", type=Path, default=Path("/tmp/gemm_ablate"))
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--time-one", type=Path, help="(internal) time this library's variant 2, write --out")
    args = parser.parse_args()
    if args.time_one:
        return time_one(args)
    wanted = {w for w in args.only.split(",") if w}
    experiments = [e for e in EXPERIMENTS if not wanted or e[0] in wanted]
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
               "--reps", str(args.reps), "--warmup", str(args.warmup)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        row = json.loads(out.read_text()) if proc.returncode == 0 and out.exists() else {
            "error": f"exit {proc.returncode}: {proc.stderr.strip()[-400:]}"}
        row.update(experiment=name, kind=kind)
        rows.append(row)
        if "error" in row:
            print(f"{name:<18} {kind:<9} failed: {row['error']}", flush=True)
            continue
        print(f"{name:<18} {kind:<9} {row['tflops']['ours']:7.1f} TFLOP/s  {row['ms']['ours']:.3f} ms  "
              f"err {row['rel_err_vs_fp64']['ours']:.2e} (sgemm {row['rel_err_vs_fp64']['sgemm']:.2e})", flush=True)
    base = rows[0]["ms"]["ours"] if rows and "ms" in rows[0] and rows[0]["experiment"] == "baseline" else None
    print(f"\n{'experiment':<18} {'kind':<9} {'ms':>7} {'TFLOP/s':>8} {'saves':>7} {'err':>9}")
    for r in rows:
        if "error" in r:
            print(f"{r['experiment']:<18} {r['kind']:<9} failed: {r['error']}")
            continue
        saves = f"{100 * (1 - r['ms']['ours'] / base):6.1f}%" if base else ""
        print(f"{r['experiment']:<18} {r['kind']:<9} {r['ms']['ours']:7.3f} {r['tflops']['ours']:8.1f} {saves:>7} "
              f"{r['rel_err_vs_fp64']['ours']:9.2e}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"case": bg.CASES[0].name, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
