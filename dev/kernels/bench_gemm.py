"""Correctness and timing sweep for the 3xTF32 GEMM, fuseforge/families/gemm/gemm_3xtf32.cu (issue #5), for a GPU session.

    python3 dev/kernels/bench_gemm.py --out $OUT/gemm.json          # full sweep, all kernels
    python3 dev/kernels/bench_gemm.py --variant ws --out $OUT/w.json  # one kernel, in this process
    python3 dev/kernels/bench_gemm.py --build-only                  # nvcc only (works without a GPU)

Kernel variants (gemm3x_set_variant): "mma" = mma.sync m16n8k8 (variant 0), "wgmma" = sm_90a warpgroup MMA
(variant 1), "ws" = sm_90a warp-specialised wgmma with A from registers (variant 2, not yet run on a GPU).
--variant both (the default; "all" is the same) runs each variant in its own subprocess (so that a fault or
hang in one cannot take the others' results with it; --variant-timeout bounds each) and prints one table
with all of them.

Builds the .cu into a shared library with nvcc (ctypes, no torch extension), then for each case:
poisons C with NaN, runs ours, cuBLAS SGEMM (TF32 off) and cuBLAS TF32, compares each with a float64
reference (relative error ||C - ref|| / ||ref||), times each with CUDA events (median of --reps after
--warmup, L2 flushed before every timed run), prints a table and writes JSON to --out.
Exits 1 when any case of ours is wrong (non-finite, poison left, error worse than 2x SGEMM's).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parents[1] / "fuseforge" / "families" / "gemm" / "gemm_3xtf32.cu"  # the package's own copy
DEVICE = "cuda"  # the sweep's device; a CPU dry run of the Python paths patches it
CEILING_TFLOPS = 137.0  # 3xTF32 ceiling on H100 (DESIGN.md section 5): TF32 peak / 3
NVCC_FLAGS = ["-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "-v", "-std=c++17"]


@dataclass(frozen=True)
class Case:
    name: str
    layout: str  # "tn": C = A.B^T (B is [N,K]); "nn": C = A.B (B is [K,N])
    m: int
    n: int
    k: int
    batch: int = 1
    epilogue: str = "none"  # "none" | "bias" | "bias_sigmoid_scale_residual"
    pad: int = 0  # extra columns in the A, B and C allocations (ld = width + pad)


CASES = [
    Case("linear 1024x8192x8192 (headline)", "tn", 1024, 8192, 8192),
    Case("linear 1024x8192x8192 +bias", "tn", 1024, 8192, 8192, epilogue="bias"),
    Case("linear 1024x8192x8192 +bias,sigmoid,scale,residual", "tn", 1024, 8192, 8192,
         epilogue="bias_sigmoid_scale_residual"),
    Case("square 4096", "tn", 4096, 4096, 4096),
    Case("square 8192", "tn", 8192, 8192, 8192),
    Case("ragged 1000x1000x999 (4-byte copies)", "tn", 1000, 1000, 999),
    Case("ragged 1000x1000x999 lda=1000 ldc=1004 (16-byte copies, partial chunks)", "tn", 1000, 1000, 999,
         pad=1),
    Case("gemv-like 1x8192x8192", "tn", 1, 8192, 8192),
    Case("nn 1024x8192x8192", "nn", 1024, 8192, 8192),
    Case("nn 4096", "nn", 4096, 4096, 4096),
    Case("nn ragged 1000x1000x999", "nn", 1000, 1000, 999),
    Case("nn ragged 77x130x33 +bias", "nn", 77, 130, 33, epilogue="bias"),
    Case("tn batched 8x512x1024x1024", "tn", 512, 1024, 1024, batch=8),
    Case("tn batched 64x1024x1024x64 (attention scores: short K, many tiles)", "tn", 1024, 1024, 64, batch=64),
    Case("nn batched 8x512x1024x1024", "nn", 512, 1024, 1024, batch=8),
]


def build(build_dir: Path, stages: int, reuse: bool = False, source: Path = SOURCE,
          tag: str = "") -> tuple[Path, str]:
    lib = build_dir / f"libgemm3x_s{stages}{'_' + tag if tag else ''}.so"
    if reuse and lib.exists():
        return lib, f"(reused {lib})"
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    cmd = [nvcc, "-shared", "-Xcompiler", "-fPIC", *NVCC_FLAGS, f"-DGEMM3X_STAGES={stages}",
           "-o", str(lib), str(source)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"nvcc failed:\n{' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    return lib, proc.stdout + proc.stderr


def sass_summary(lib_path: Path, out_dir: Path | None) -> dict:
    """HMMA count and local-memory traffic in the built library's SASS (needs cuobjdump)."""
    tool = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    proc = subprocess.run([tool, "-sass", str(lib_path)], capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[:500]}
    sass = proc.stdout
    if out_dir is not None:
        (out_dir / "gemm3x.sass").write_text(sass)
    words = sass.split()
    return {"HMMA": sum(w.startswith("HMMA") for w in words), "HGMMA": sum(w.startswith("HGMMA") for w in words),
            "LDL": sum(w.startswith("LDL") for w in words), "STL": sum(w.startswith("STL") for w in words),
            "LDGSTS": sum(w.startswith("LDGSTS") for w in words)}


VARIANTS = {"mma": 0, "wgmma": 1, "ws": 2}


def load(lib_path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(lib_path))
    lib.gemm3x_set_variant.argtypes, lib.gemm3x_set_variant.restype = [ctypes.c_int], ctypes.c_int
    p, i, ll, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_float
    plain = [p, p, p, i, i, i, i, i, i, p, p]
    batched = [p, p, p, i, i, i, i, i, i, i, ll, ll, ll, p, p]
    for name, args in [("gemm3x_tn", plain), ("gemm3x_nn", plain), ("gemm3x_tn_batched", batched),
                       ("gemm3x_nn_batched", batched),
                       ("gemm3x_tn_bias_sigmoid_scale_residual", [p, p, p, i, i, i, i, i, i, p, f, p, i, p])]:
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, ctypes.c_int
    return lib


def set_tf32(torch, on: bool) -> None:
    """cuBLAS fp32 matmul precision; one API only (mixing the legacy and new ones can raise)."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        matmul.fp32_precision = "tf32" if on else "ieee"
    else:
        matmul.allow_tf32 = on


class Operands:
    """Random operands of one case (views into padded allocations when case.pad), C poisoned with NaN."""

    def __init__(self, torch, case: Case, seed: int = 0):
        g = torch.Generator(device=DEVICE).manual_seed(seed)
        b, m, n, k = case.batch, case.m, case.n, case.k

        def mat(rows, cols, extra=0):
            # case.pad: leading dimension = cols rounded up to a multiple of 4 (+ extra), a strided view
            width = ((cols + 3) // 4) * 4 + extra if case.pad else cols
            return torch.randn(b, rows, width, device=DEVICE, generator=g)[:, :, :cols]

        self.a = mat(m, k)
        self.b = mat(n, k) if case.layout == "tn" else mat(k, n)
        c_cols = ((n + 3) // 4) * 4 + 4 if case.pad else n
        self.c_full = torch.full((b, m, c_cols), float("nan"), device=DEVICE)
        self.c = self.c_full[:, :, :n]
        self.bias = torch.randn(n, device=DEVICE, generator=g) if case.epilogue != "none" else None
        self.residual = torch.randn(m, n, device=DEVICE, generator=g)
        self.scale = 0.75

    def torch_product(self, torch, case: Case, dtype):
        a, b = self.a.to(dtype), self.b.to(dtype)
        prod = torch.matmul(a, b.transpose(-1, -2) if case.layout == "tn" else b)
        return self.epilogue(torch, case, prod)

    def epilogue(self, torch, case: Case, prod):
        if case.epilogue == "none":
            return prod
        prod = prod + self.bias.to(prod.dtype)
        if case.epilogue == "bias":
            return prod
        return torch.sigmoid(prod) * self.scale + self.residual.to(prod.dtype)


def launch_ours(lib, ops: Operands, case: Case, stream: int) -> int:
    a, b, c = ops.a, ops.b, ops.c
    lda, ldb, ldc = a.stride(1), b.stride(1), c.stride(1)
    bias = ops.bias.data_ptr() if ops.bias is not None else None
    m, n, k = case.m, case.n, case.k
    if case.epilogue == "bias_sigmoid_scale_residual":
        assert case.batch == 1 and case.layout == "tn"
        r = ops.residual
        return lib.gemm3x_tn_bias_sigmoid_scale_residual(a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k, lda,
                                                         ldb, ldc, bias, ops.scale, r.data_ptr(), r.stride(0),
                                                         stream)
    if case.batch > 1:
        fn = lib.gemm3x_tn_batched if case.layout == "tn" else lib.gemm3x_nn_batched
        return fn(a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k, lda, ldb, ldc, case.batch, a.stride(0),
                  b.stride(0), c.stride(0), bias, stream)
    fn = lib.gemm3x_tn if case.layout == "tn" else lib.gemm3x_nn
    return fn(a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k, lda, ldb, ldc, bias, stream)


def time_ms(torch, fn, flush, warmup: int, reps: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        flush.zero_()  # evicts A, B, C from L2 (the buffer is several times the L2 size)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def rel_err(torch, out, ref) -> float:
    return (torch.linalg.vector_norm(out.double() - ref) / torch.linalg.vector_norm(ref)).item()


def run_case(torch, lib, case: Case, flush, args) -> dict:
    ops = Operands(torch, case)
    stream = torch.cuda.current_stream().cuda_stream
    rc = launch_ours(lib, ops, case, stream)
    if rc != 0:
        return {"case": asdict(case), "error": f"launch returned cudaError {rc}", "ok": False}
    torch.cuda.synchronize()
    ref = ops.torch_product(torch, case, torch.float64)
    poison_left = bool(torch.isnan(ops.c).any().item())
    pad_written = bool(ops.c_full.shape[-1] > case.n and not torch.isnan(ops.c_full[:, :, case.n:]).all().item())
    err = {"ours": rel_err(torch, ops.c, ref)}
    for label, on in [("sgemm", False), ("tf32", True)]:
        set_tf32(torch, on)
        err[label] = rel_err(torch, ops.torch_product(torch, case, torch.float32), ref)
    del ref

    ms = {"ours": time_ms(torch, lambda: launch_ours(lib, ops, case, stream), flush, args.warmup, args.reps)}
    for label, on in [("sgemm", False), ("tf32", True)]:
        set_tf32(torch, on)
        ms[label] = time_ms(torch, lambda: ops.torch_product(torch, case, torch.float32), flush, args.warmup,
                            args.reps)
    set_tf32(torch, False)
    flops = 2.0 * case.batch * case.m * case.n * case.k
    ok = (not poison_left and not pad_written and err["ours"] == err["ours"]
          and err["ours"] <= max(2.0 * err["sgemm"], 1e-6))
    return {"case": asdict(case), "ms": ms, "tflops": {key: flops / (v * 1e9) for key, v in ms.items()},
            "rel_err_vs_fp64": err, "poison_left": poison_left, "ldc_padding_written": pad_written, "ok": ok}


def print_table(rows: list[dict]) -> None:
    head = (f"{'case':<70} {'ours':>7} {'sgemm':>7} {'tf32':>7} {'ceil%':>6}   "
            f"{'err ours':>9} {'err sgemm':>9} {'err tf32':>9}  ok")
    print(head)
    print("-" * len(head))
    for r in rows:
        if "error" in r:
            print(f"{r['case']['name']:<70} {r['error']}")
            continue
        t, e = r["tflops"], r["rel_err_vs_fp64"]
        print(f"{r['case']['name']:<70} {t['ours']:7.1f} {t['sgemm']:7.1f} {t['tf32']:7.1f} "
              f"{100 * t['ours'] / CEILING_TFLOPS:6.1f}   {e['ours']:9.2e} {e['sgemm']:9.2e} {e['tf32']:9.2e}  "
              f"{'yes' if r['ok'] else 'NO'}")
    print(f"(TFLOP/s; ceiling for 3xTF32 ~{CEILING_TFLOPS:.0f}; target >= 110 on the headline case)")


def print_combined_table(by_variant: dict[str, dict]) -> None:
    """One line per case: every kernel's TFLOP/s and error, cuBLAS from the first variant that ran it."""
    names = []
    for res in by_variant.values():
        for r in res.get("rows", []):
            if r["case"]["name"] not in names:
                names.append(r["case"]["name"])
    head = (f"{'case':<62} " + " ".join(f"{v:>6}" for v in VARIANTS) + f" {'sgemm':>6} {'tf32':>6}   "
            + " ".join(f"{'err ' + v:>9}" for v in VARIANTS) + f" {'err sgemm':>9}  ok({'/'.join(VARIANTS)})")
    print(head)
    print("-" * len(head))
    for name in names:
        cells, errs, oks, base = [], [], [], None
        for v in VARIANTS:
            row = next((r for r in by_variant.get(v, {}).get("rows", []) if r["case"]["name"] == name), None)
            if row is None or "error" in row:
                cells.append(f"{'-':>6}")
                errs.append("-" if row is None else row["error"][:20])
                oks.append("-" if row is None else "NO")
                continue
            base = base or row
            cells.append(f"{row['tflops']['ours']:6.1f}")
            errs.append(f"{row['rel_err_vs_fp64']['ours']:.2e}")
            oks.append("yes" if row["ok"] else "NO")
        t = base["tflops"] if base else {"sgemm": float("nan"), "tf32": float("nan")}
        e = base["rel_err_vs_fp64"]["sgemm"] if base else float("nan")
        print(f"{name[:62]:<62} {' '.join(cells)} {t['sgemm']:6.1f} {t['tf32']:6.1f}   "
              + " ".join(f"{x:>9}" for x in errs) + f" {e:9.2e}  {'/'.join(oks)}")
    for v, res in by_variant.items():
        if "failed" in res:
            print(f"variant {v}: {res['failed']}")
    print(f"(TFLOP/s; ceiling for 3xTF32 ~{CEILING_TFLOPS:.0f}; target >= 110 on the headline case)")


def run_both(args, build_dir: Path) -> int:
    """Each variant in a subprocess (a fault or hang in one variant must not lose the others' results)."""
    by_variant, rc = {}, 0
    for v in VARIANTS:
        out = build_dir / f"result_{v}.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--variant", v, "--stages", str(args.stages),
               "--reps", str(args.reps), "--warmup", str(args.warmup), "--only", args.only,
               "--build-dir", str(build_dir), "--reuse-build", "--out", str(out)]
        print(f"== variant {v}: {' '.join(cmd)}", flush=True)
        try:
            proc = subprocess.run(cmd, timeout=args.variant_timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
        if out.exists():
            try:
                by_variant[v] = json.loads(out.read_text())
            except json.JSONDecodeError as exc:
                by_variant[v] = {"failed": f"unreadable result: {exc}"}
        if code != 0:
            rc = 1
            by_variant.setdefault(v, {})["failed"] = f"exit status {code}"
    print_combined_table(by_variant)
    if args.out:
        args.out.write_text(json.dumps({"variants": by_variant}, indent=2))
        print(f"wrote {args.out}")
    return rc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="JSON results path")
    parser.add_argument("--stages", type=int, default=3, help="cp.async pipeline depth of the mma kernel (-DGEMM3X_STAGES; wgmma: fixed 3)")
    parser.add_argument("--reps", type=int, default=25, help="timed runs per measurement (median; >= 20)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--only", default="", help="run only cases whose name contains this text")
    parser.add_argument("--build-dir", type=Path, default=None)
    parser.add_argument("--build-only", action="store_true", help="compile (prints ptxas -v) and stop")
    parser.add_argument("--variant", choices=[*VARIANTS, "both", "all"], default="both",
                        help="kernel: mma (mma.sync), wgmma (sm_90a), ws (sm_90a warp-specialised), "
                             "both/all (every variant, one subprocess each)")
    parser.add_argument("--reuse-build", action="store_true", help="use the library in --build-dir if present")
    parser.add_argument("--variant-timeout", type=int, default=900, help="seconds per variant subprocess")
    args = parser.parse_args()

    build_dir = args.build_dir or Path(tempfile.mkdtemp(prefix="gemm3x_"))
    build_dir.mkdir(parents=True, exist_ok=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.variant in ("both", "all") and not args.build_only:
        print(build(build_dir, args.stages)[1].strip())  # once, here; the subprocesses reuse the library
        return run_both(args, build_dir)
    lib_path, ptxas_log = build(build_dir, args.stages, reuse=args.reuse_build)
    print(ptxas_log.strip())
    if args.build_only:
        print(f"built {lib_path}")
        return 0

    import torch

    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU (use --build-only to just compile)")
    lib = load(lib_path)
    if lib.gemm3x_set_variant(VARIANTS[args.variant]) < 0:
        sys.exit(f"library refused variant {args.variant}")
    print(f"variant: {args.variant}")
    sass = sass_summary(lib_path, args.out.parent if args.out else None)
    print(f"SASS: {sass}")
    props = torch.cuda.get_device_properties(0)
    flush = torch.empty(2 * props.L2_cache_size, dtype=torch.float32, device=DEVICE)  # 8x the L2 bytes
    set_tf32(torch, False)
    rows = []
    result = {"device": props.name, "torch": torch.__version__, "variant": args.variant, "stages": args.stages,
              "reps": args.reps,
              "ceiling_tflops": CEILING_TFLOPS, "nvcc_flags": NVCC_FLAGS, "ptxas": ptxas_log, "sass": sass, "rows": rows}
    for case in CASES:
        if args.only in case.name:
            print(f"start: {case.name}", flush=True)  # the last "start" without "done" is the one that hung
            rows.append(run_case(torch, lib, case, flush, args))
            print(f"done: {case.name}", flush=True)
            if args.out:  # after every case, so a variant killed by --variant-timeout keeps what it finished
                tmp = args.out.with_name(args.out.name + ".tmp")
                tmp.write_text(json.dumps({**result, "partial": True}, indent=2))
                tmp.replace(args.out)
    print_table(rows)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
        print(f"wrote {args.out}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
