"""Correctness and timing sweep for dev/kernels/rowwise.cu (issue #6), for a GPU session.

    python3 dev/kernels/bench_rowwise.py --out $OUT/rowwise.json     # full sweep
    python3 dev/kernels/bench_rowwise.py --build-only                # nvcc only (works without a GPU)

Builds the .cu into a shared library with nvcc (ctypes, no torch extension), then for each case:
poisons y with NaN, runs ours, compares it and eager fp32 torch with a float64 torch reference
(relative L2 error ||y - ref|| / ||ref||), times ours, eager torch and torch.compile (default mode) with
CUDA events (median of --reps after --warmup, L2 flushed before every timed run), prints a table with
achieved GB/s (bytes of x read once + y written once) against the ~3 TB/s copy ceiling, writes JSON.
A case of ours is wrong when it is non-finite where the reference is finite, leaves poison, or its error
exceeds 2x eager fp32's + 1e-7 (that is, ||y - ref|| <= 2 ||eager - ref|| + 1e-7 ||ref||, the 1e-7
being 1e-7 * rms(ref) per element). Exit status 1 when any case of ours is wrong.
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
SOURCE = HERE / "rowwise.cu"
DEVICE = "cuda"  # the sweep's device; a CPU dry run of the Python paths patches it
CEILING_GBS = 3000.0  # ~device-to-device copy bandwidth of an H100 SXM (HBM3 ~3.35 TB/s peak)
NVCC_FLAGS = ["-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "-v", "-std=c++17"]

OPS = ("softmax", "logsumexp_relu", "layernorm_relu", "rmsnorm_residual")
TEMPERATURE = 0.7  # gemm_softmax_rows: logits / 0.7 -> prescale = fp32(1 / 0.7)


@dataclass(frozen=True)
class Case:
    name: str
    op: str  # one of OPS
    rows: int
    cols: int
    offset: int = 0  # x and y start this many floats into their allocations (misaligned when not % 4)


def _cases() -> list[Case]:
    cases = [
        Case("softmax 1024x2048 /0.7 (gemm_softmax_rows)", "softmax", 1024, 2048),
        Case("logsumexp_relu 4096x4096 (matmul_logsumexp_relu)", "logsumexp_relu", 4096, 4096),
        Case("layernorm_relu 4096x4096 (gemm_layernorm_relu)", "layernorm_relu", 4096, 4096),
        Case("rmsnorm_residual 16384x4096 (rmsnorm_residual)", "rmsnorm_residual", 16384, 4096),
    ]
    # Odd shapes: every path (warp NPT 8/32, block NPT 8/32, two-pass), float4 and scalar variants.
    odd = [(257, 1), (257, 3), (64, 256), (64, 1000), (64, 1024), (64, 4097), (32, 8192), (16, 16384),
           (8, 20000), (8, 65536), (8, 65537), (1, 4096), (1, 1)]
    for op in OPS:
        for rows, cols in odd:
            cases.append(Case(f"{op} {rows}x{cols}", op, rows, cols))
        cases.append(Case(f"{op} 64x4096 misaligned (+1 float)", op, 64, 4096, offset=1))
    return cases


CASES = _cases()


def build(build_dir: Path) -> tuple[Path, str]:
    lib = build_dir / "librowwise.so"
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    cmd = [nvcc, "-shared", "-Xcompiler", "-fPIC", *NVCC_FLAGS, "-o", str(lib), str(SOURCE)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"nvcc failed:\n{' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    return lib, proc.stdout + proc.stderr


def load(lib_path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(lib_path))
    p, i, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
    for name, args in [("row_softmax", [p, p, i, i, f, p]), ("row_logsumexp_relu", [p, p, i, i, p]),
                       ("row_layernorm_relu", [p, p, p, p, i, i, f, p]),
                       ("row_rmsnorm_residual", [p, p, p, i, i, f, p])]:
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, ctypes.c_int
    return lib


class Operands:
    """Random inputs of one case; y (NaN-poisoned) and x are views offset into their allocations."""

    def __init__(self, torch, case: Case, seed: int = 0):
        g = torch.Generator(device=DEVICE).manual_seed(seed)
        n = case.rows * case.cols
        self.x_full = torch.randn(n + case.offset, device=DEVICE, generator=g)
        self.x = self.x_full[case.offset:].view(case.rows, case.cols)
        if case.op == "softmax":
            self.x.mul_(3.0)  # logits of a few units, like a trained head's
        out = case.rows if case.op == "logsumexp_relu" else n
        self.y_full = torch.full((out + case.offset,), float("nan"), device=DEVICE)
        self.y = self.y_full[case.offset:].view(case.rows, -1)
        self.w = torch.randn(case.cols, device=DEVICE, generator=g) * 0.5 + 1.0
        self.b = torch.randn(case.cols, device=DEVICE, generator=g) * 0.1
        self.prescale = float(torch.tensor(1.0 / TEMPERATURE, dtype=torch.float32))  # the fp32 we pass
        self.eps = 1e-5 if case.op == "layernorm_relu" else 1e-6

    def poison(self) -> None:
        self.y_full.fill_(float("nan"))

    def torch_fn(self, torch, case: Case):
        """The op as eager torch code (the reference formula); works in any dtype."""
        prescale, eps, cols = self.prescale, self.eps, case.cols
        if case.op == "softmax":
            return lambda x: torch.softmax(x * prescale, dim=-1)
        if case.op == "logsumexp_relu":
            return lambda x: torch.relu(torch.logsumexp(x, dim=-1, keepdim=True))
        if case.op == "layernorm_relu":
            return lambda x, w, b: torch.relu(torch.nn.functional.layer_norm(x, (cols,), w, b, eps))
        return lambda x, w: x + x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * w

    def args(self, case: Case, dtype=None) -> tuple:
        def cast(t):
            return t if dtype is None else t.to(dtype)

        if case.op == "layernorm_relu":
            return cast(self.x), cast(self.w), cast(self.b)
        if case.op == "rmsnorm_residual":
            return cast(self.x), cast(self.w)
        return (cast(self.x),)


def launch_ours(lib, ops: Operands, case: Case, stream: int) -> int:
    x, y, r, c = ops.x.data_ptr(), ops.y.data_ptr(), case.rows, case.cols
    if case.op == "softmax":
        return lib.row_softmax(x, y, r, c, ops.prescale, stream)
    if case.op == "logsumexp_relu":
        return lib.row_logsumexp_relu(x, y, r, c, stream)
    if case.op == "layernorm_relu":
        return lib.row_layernorm_relu(x, ops.w.data_ptr(), ops.b.data_ptr(), y, r, c, ops.eps, stream)
    return lib.row_rmsnorm_residual(x, ops.w.data_ptr(), y, r, c, ops.eps, stream)


def moved_bytes(case: Case) -> int:
    out = case.rows if case.op == "logsumexp_relu" else case.rows * case.cols
    params = {"layernorm_relu": 2, "rmsnorm_residual": 1}.get(case.op, 0) * case.cols
    return 4 * (case.rows * case.cols + out + params)


def time_ms(torch, fn, flush, warmup: int, reps: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        flush.zero_()  # evicts x and y from L2 (the buffer is several times the L2 size)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def rel_err(torch, out, ref) -> float:
    """||out - ref|| / ||ref||; the absolute ||out - ref|| where ref is all zeros (e.g. relu of a negative)."""
    out = out.reshape(ref.shape).double()
    diff, norm = torch.linalg.vector_norm(out - ref).item(), torch.linalg.vector_norm(ref).item()
    return diff / norm if norm > 0 else diff


def check(torch, ops: Operands, case: Case) -> dict:
    """Errors of ours (already in ops.y) and of eager fp32 against float64; the verdict."""
    fn = ops.torch_fn(torch, case)
    ref = fn(*ops.args(case, torch.float64))
    ours = ops.y.reshape(ref.shape)
    finite_ref = torch.isfinite(ref)
    poison_left = bool(torch.isnan(ours).any().item())
    bad_nonfinite = bool((finite_ref & ~torch.isfinite(ours)).any().item())
    tail_written = bool(not torch.isnan(ops.y_full[:case.offset]).all().item()) if case.offset else False
    err = {"ours": rel_err(torch, ours, ref), "eager_fp32": rel_err(torch, fn(*ops.args(case)), ref)}
    max_abs = (ours.double() - ref).abs().max().item()
    ok = (not poison_left and not bad_nonfinite and not tail_written and err["ours"] == err["ours"]
          and err["ours"] <= 2.0 * err["eager_fp32"] + 1e-7)
    return {"rel_err_vs_fp64": err, "max_abs_err": max_abs, "poison_left": poison_left,
            "nonfinite_where_ref_finite": bad_nonfinite, "wrote_before_y": tail_written, "ok": ok}


def run_case(torch, lib, case: Case, flush, compiled: dict, args) -> dict:
    ops = Operands(torch, case)
    stream = torch.cuda.current_stream().cuda_stream
    rc = launch_ours(lib, ops, case, stream)
    if rc != 0:
        return {"case": asdict(case), "error": f"launch returned cudaError {rc}", "ok": False}
    torch.cuda.synchronize()
    result = {"case": asdict(case), **check(torch, ops, case)}
    if args.no_timing:
        return result
    ms = {"ours": time_ms(torch, lambda: launch_ours(lib, ops, case, stream), flush, args.warmup, args.reps)}
    fn, fargs = ops.torch_fn(torch, case), ops.args(case)
    ms["eager"] = time_ms(torch, lambda: fn(*fargs), flush, args.warmup, args.reps)
    try:
        key = (case.op, case.cols)
        if key not in compiled:
            compiled[key] = torch.compile(ops.torch_fn(torch, case))
        cfn = compiled[key]
        ms["compile"] = time_ms(torch, lambda: cfn(*fargs), flush, args.warmup, args.reps)
    except Exception as exc:  # noqa: BLE001 -- record and go on; our kernel's result still counts
        result["compile_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    # Once more after the timed launches (warm caches, many launches): re-poison, run, re-check.
    ops.poison()
    launch_ours(lib, ops, case, stream)
    torch.cuda.synchronize()
    recheck = check(torch, ops, case)
    result["ok"] = result["ok"] and recheck["ok"]
    nbytes = moved_bytes(case)
    result.update(ms=ms, bytes=nbytes, gbs={k: nbytes / (v * 1e6) for k, v in ms.items()})
    return result


def print_table(rows: list[dict]) -> None:
    head = (f"{'case':<52} {'ours':>7} {'eager':>7} {'compile':>7} {'ceil%':>6} {'x eager':>7} {'x comp':>7}   "
            f"{'err ours':>9} {'err eager':>9}  ok")
    print(head)
    print("-" * len(head))
    for r in rows:
        if "error" in r:
            print(f"{r['case']['name']:<52} {r['error']}")
            continue
        e = r["rel_err_vs_fp64"]
        if "gbs" in r:
            g, ms = r["gbs"], r["ms"]
            comp = g.get("compile", float("nan"))
            perf = (f"{g['ours']:7.0f} {g['eager']:7.0f} {comp:7.0f} {100 * g['ours'] / CEILING_GBS:6.1f} "
                    f"{ms['eager'] / ms['ours']:7.2f} {ms.get('compile', float('nan')) / ms['ours']:7.2f}")
        else:
            perf = " " * 47
        print(f"{r['case']['name']:<52} {perf}   {e['ours']:9.2e} {e['eager_fp32']:9.2e}  "
              f"{'yes' if r['ok'] else 'NO'}")
    print(f"(GB/s = (x read + y written + params) / time; ceiling ~{CEILING_GBS:.0f} GB/s copy; "
          "'x eager'/'x comp' = speed-up of ours)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="JSON results path")
    parser.add_argument("--reps", type=int, default=25, help="timed runs per measurement (median; >= 20)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--only", default="", help="run only cases whose name contains this text")
    parser.add_argument("--no-timing", action="store_true", help="correctness only")
    parser.add_argument("--build-dir", type=Path, default=None)
    parser.add_argument("--build-only", action="store_true", help="compile (prints ptxas -v) and stop")
    args = parser.parse_args()

    build_dir = args.build_dir or Path(tempfile.mkdtemp(prefix="rowwise_"))
    build_dir.mkdir(parents=True, exist_ok=True)
    lib_path, ptxas_log = build(build_dir)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.build_only:
        print(ptxas_log.strip())
        print(f"built {lib_path}")
        return 0

    import torch

    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU (use --build-only to just compile)")
    lib = load(lib_path)
    props = torch.cuda.get_device_properties(0)
    flush = torch.empty(2 * props.L2_cache_size, dtype=torch.float32, device=DEVICE)  # 8x the L2 bytes
    rows, compiled = [], {}
    for case in CASES:
        if args.only in case.name:
            rows.append(run_case(torch, lib, case, flush, compiled, args))
            print(f"done: {case.name}  ok={rows[-1]['ok']}", flush=True)
    print_table(rows)
    result = {"device": props.name, "torch": torch.__version__, "reps": args.reps, "ceiling_gbs": CEILING_GBS,
              "nvcc_flags": NVCC_FLAGS, "ptxas": ptxas_log, "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
        print(f"wrote {args.out}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
