"""Where the conv family's direct fp32 convolution beats cuDNN: a sweep over synthetic shapes (issue #24, lab).

    .venv/bin/python dev/kernels/conv_direct/sweep_conv_direct.py --out $OUT/conv_sweep.json
    .venv/bin/python dev/kernels/conv_direct/sweep_conv_direct.py --dry-run      # the grid, no CUDA, no nvcc

Calibrates the rule for which convolutions the product hands to fuseforge/families/conv/direct.cuh: a grid of
2-D convolutions (C_in 1-32, 3x3 / 5x5 / 7x7, 16-128 output channels, stride 1 and 2, padding 0 and 1, output
128 x 128, batch for ~0.5 GB of output) and 3-D ones (C_in 1-16, 3x3x3, 16-64 channels, input [N, C, 16, 64,
64]), dot products C*KD*KH*KW from 9 to 432. Each shape's tiling is the package's rule
(families/conv/tiling.py: choose, which shortens or refuses tiles above SMEM_LIMIT of shared memory); every distinct tiling is one
instantiation of `ff_conv_direct::launch` with a bias epilogue, all in ONE shared library built by nvcc for
sm_90a from several .cu files compiled in parallel (ptxas' register/spill report goes into the JSON), called
through ctypes on torch's tensors and stream.

Per shape, in one worker process (a fault ends the worker: that shape is recorded as failed and a new worker
takes the rest), same input (torch.randn, seed 0), weights and bias uniform in +-1/sqrt(C*KD*KH*KW):
  ours               direct.cuh, conv + bias in the epilogue (output NaN-filled before the checked launch)
  cudnn              F.conv2d/conv3d with bias, torch's default flags (cudnn.allow_tf32 True, benchmark False)
  cudnn_benchmark    the same with torch.backends.cudnn.benchmark = True (after its one autotuning call)
Times: median of --reps CUDA-event timings with a 64 MB L2 flush before each (bench_conv_direct.timed).
Errors: max|err| / RMS(truth) of the first --check-batch images of the full-batch outputs against a float64
conv on the GPU; NaN count of ours over the whole output. Shapes with no tiling get the cuDNN numbers only.
--budget stops starting new shapes when the time left (build included) runs short; skipped shapes are listed.
Prints one line per shape and writes JSON (--out). Exit status 1 if any of ours is wrong (error > 1e-5, NaNs,
or a failed launch) or the build failed.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path[:0] = [str(REPO), str(HERE)]
import bench_conv_direct as bench  # noqa: E402  (timed, _rel_err: the lab's timing and error helpers)
import conv_direct_model as cdm  # noqa: E402  (geometry: the launcher's 18 ints)

from fuseforge.families.conv import tiling  # noqa: E402  (the product's tiling rule)

KERNEL = REPO / "fuseforge" / "families" / "conv" / "direct.cuh"
GENCODE = "-gencode=arch=compute_90a,code=sm_90a"
NVCC_FLAGS = ("-O3", GENCODE, "-std=c++17", "-Xptxas", "-v")
TOL = 1e-5  # ours is wrong above this max|err| / RMS(truth)
OUT_HW = 128  # 2-D output extent
OUT_BYTES = 512 << 20  # batch chosen for about this much output (0.5-1 GB)
DILATION = (1, 1, 1)


# ---- the grid ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Shape:
    dims: int
    c: int
    k: int
    window: tuple[int, int, int]  # (KD, KH, KW); KD = 1 in 2-D
    stride: int
    padding: int
    x_shape: tuple[int, ...]

    @property
    def name(self) -> str:
        win = "x".join(map(str, self.window[3 - self.dims:]))
        return f"{self.dims}d_c{self.c}_k{self.k}_{win}_s{self.stride}_p{self.padding}"

    @property
    def dot(self) -> int:
        return self.c * math.prod(self.window)

    @property
    def stride3(self) -> tuple[int, int, int]:
        return (1, self.stride, self.stride) if self.dims == 2 else (self.stride,) * 3

    @property
    def padding3(self) -> tuple[int, int, int]:
        return (0, self.padding, self.padding) if self.dims == 2 else (self.padding,) * 3

    def geometry(self) -> cdm.Geometry:
        d = self.dims
        return cdm.geometry(list(self.x_shape), self.k, self.window[3 - d:], self.stride3[3 - d:],
                            self.padding3[3 - d:], DILATION[3 - d:])

    @property
    def out_shape(self) -> tuple[int, ...]:
        g = self.geometry()
        return (g.n, g.k, g.oh, g.ow) if self.dims == 2 else (g.n, g.k, g.od, g.oh, g.ow)

    @property
    def out_bytes(self) -> int:
        return 4 * math.prod(self.out_shape)

    @property
    def gflop(self) -> float:
        return 2.0 * math.prod(self.out_shape) * self.dot / 1e9


def _batch(per_image_bytes: int) -> int:
    """The batch (a multiple of 8) for about OUT_BYTES of output."""
    return max(8, round(OUT_BYTES / per_image_bytes / 8) * 8)


def shape_2d(c: int, k: int, win: int, stride: int = 1, padding: int = 1) -> Shape:
    """Input sized for a 128 x 128 output."""
    h = (OUT_HW - 1) * stride + win - 2 * padding
    return Shape(2, c, k, (1, win, win), stride, padding, (_batch(4 * k * OUT_HW * OUT_HW), c, h, h))


def shape_3d(c: int, k: int, padding: int = 0, extent: tuple[int, int, int] = (16, 64, 64)) -> Shape:
    out = [e + 2 * padding - 2 for e in extent]
    return Shape(3, c, k, (3, 3, 3), 1, padding, (_batch(4 * k * math.prod(out)), c, *extent))


def grid() -> list[Shape]:
    """The sweep's shapes, most informative first (a short --budget drops the tail)."""
    shapes = [shape_2d(c, 64, 3) for c in (1, 3, 4, 8, 12, 16, 24, 32)]  # the C axis at 3x3
    shapes += [shape_2d(c, 64, 5) for c in (1, 3, 4, 8, 12, 16)]  # ... at 5x5
    shapes += [shape_2d(c, 64, 7) for c in (1, 3, 4)]  # ... at 7x7 (C <= 4)
    shapes += [shape_3d(c, k) for c in (1, 3, 8, 16) for k in (16, 32, 64)]  # 3-D
    shapes += [shape_2d(c, 16, 3) for c in (1, 3, 8, 16, 32)]  # few output channels: 16-channel blocks
    shapes += [shape_2d(c, 16, 5) for c in (3, 8, 16)]
    shapes += [shape_2d(3, 16, 7)]
    shapes += [shape_2d(c, 128, 3) for c in (3, 8, 16)]  # two channel groups
    shapes += [shape_2d(c, 128, 5, padding=0) for c in (3, 8)]
    shapes += [shape_2d(c, 64, 3, padding=0) for c in (3, 8)]  # no padding
    shapes += [shape_2d(c, 64, 3, stride=2) for c in (3, 8, 16)]  # stride 2: the general row path
    shapes += [shape_2d(3, 64, 5, stride=2), shape_2d(3, 64, 7, stride=2)]
    shapes += [shape_3d(3, k, padding=1) for k in (16, 64)]
    return shapes


@dataclass(frozen=True)
class Inst:
    """One instantiation of ff_conv_direct::launch (with the bias epilogue)."""

    c: int
    kd: int
    kh: int
    kw: int
    kpt: int
    wk: int
    wh: int
    ph: int
    unit_rows: bool

    @property
    def name(self) -> str:
        return (f"c{self.c}_w{self.kd}x{self.kh}x{self.kw}_t{self.kpt}x{self.wk}x{self.wh}x{self.ph}"
                f"_{'u' if self.unit_rows else 'g'}")

    @property
    def args(self) -> tuple:
        return (self.c, self.kd, self.kh, self.kw, self.kpt, self.wk, self.wh, self.ph, self.unit_rows)


def plan(shape: Shape) -> dict:
    """The product's tiling of `shape` (tiling.choose), or why it has none."""
    g = shape.geometry()
    t = tiling.choose(shape.c, shape.k, shape.window, shape.stride3, DILATION, g.oh)
    if isinstance(t, str):
        return {"tiling": None, "reason": t, "smem_bytes": None, "useful_fraction": None, "inst": None}
    smem = tiling.smem_bytes(t, shape.c, shape.window, shape.stride3, DILATION)
    entry = {"tiling": {"kpt": t.kpt, "wk": t.wk, "wh": t.wh, "ph": t.ph, "block_k": t.block_k,
                        "tile_h": t.tile_h, "threads": t.threads},
             "smem_bytes": smem, "useful_fraction": tiling.useful_fraction(t, shape.k, g.oh, g.ow)}
    unit = g.sh == 1 and g.dh == 1
    return {**entry, "reason": None, "inst": Inst(shape.c, *shape.window, t.kpt, t.wk, t.wh, t.ph, unit)}


def instantiations(shapes: list[Shape]) -> list[Inst]:
    return sorted({p["inst"] for p in map(plan, shapes) if p["inst"] is not None}, key=lambda i: i.args)


# ---- the library's source ----------------------------------------------------------------------------------

PRELUDE = r"""// Generated by dev/kernels/conv_direct/sweep_conv_direct.py: launchers of ff_conv_direct::launch with a bias
// epilogue, one extern "C" function per instantiation; direct.cuh (fuseforge/families/conv/) pasted below.
%(kernel)s

namespace ffsweep {
struct EpiBias {
    const float* bias;
    __device__ __forceinline__ float operator()(float acc, int k, int64_t) const { return acc + __ldg(bias + k); }
};
}  // namespace ffsweep

#define FFSWEEP_LAUNCHER(NAME, C, KD, KH, KW, KPT, WK, WH, PH, UNIT)                                              \
    extern "C" int ffsweep_##NAME(const float* x, const float* w, const float* bias, float* y, const int* geom,   \
                                  void* stream) {                                                                \
        const ff_conv_direct::Geometry g{geom[0],  geom[1],  geom[2],  geom[3],  geom[4],  geom[5],              \
                                         geom[6],  geom[7],  geom[8],  geom[9],  geom[10], geom[11],             \
                                         geom[12], geom[13], geom[14], geom[15], geom[16], geom[17]};            \
        if (UNIT && (g.sh != 1 || g.dh != 1)) return static_cast<int>(cudaErrorInvalidValue);                   \
        return static_cast<int>(ff_conv_direct::launch<C, KD, KH, KW, KPT, WK, WH, PH, UNIT>(                    \
            x, w, y, g, ffsweep::EpiBias{bias}, static_cast<cudaStream_t>(stream)));                             \
    }
"""


def source(insts: list[Inst]) -> str:
    """One translation unit with these instantiations."""
    lines = [PRELUDE % {"kernel": KERNEL.read_text()}]
    for i in insts:
        args = ", ".join(str(v).lower() for v in i.args)
        lines.append(f"FFSWEEP_LAUNCHER({i.name}, {args})")
    return "\n".join(lines) + "\n"


def shards(insts: list[Inst], n: int) -> list[list[Inst]]:
    """`insts` dealt into at most n translation units (nvcc compiles them in parallel)."""
    n = max(1, min(n, len(insts)))
    return [insts[j::n] for j in range(n)]


_KERNEL_ARGS = re.compile(r"conv_direct_kernelILi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELb([01])E")


def parse_ptxas(log: str) -> list[dict]:
    """ptxas -v's report per kernel: its template arguments (from the mangled name), registers, spills, stack."""
    kernels = []
    for block in re.split(r"(?=ptxas info\s*: Compiling entry function)", log):
        name = re.search(r"Compiling entry function '(\w+)'", block)
        if not name:
            continue
        entry: dict = {"kernel": name.group(1)}
        args = _KERNEL_ARGS.search(name.group(1))
        if args:
            vals = [int(v) for v in args.groups()]
            entry["inst"] = Inst(*vals[:8], bool(vals[8])).name
        regs = re.search(r"Used (\d+) registers", block)
        spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", block)
        stack = re.search(r"(\d+) bytes stack frame", block)
        entry.update(registers=int(regs.group(1)) if regs else None,
                     spill_stores=int(spill.group(1)) if spill else None,
                     spill_loads=int(spill.group(2)) if spill else None,
                     stack_bytes=int(stack.group(1)) if stack else None)
        kernels.append(entry)
    return kernels


def nvcc_compile(src: Path, out: Path, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    proc = subprocess.run(["nvcc", *NVCC_FLAGS, *extra, "-o", str(out), str(src)], capture_output=True, text=True,
                          timeout=900)
    return proc, time.perf_counter() - t0


def build(insts: list[Inst], build_dir: Path | None = None, jobs: int | None = None) -> dict:
    """Compile the instantiations (one .cu per shard, in parallel) and link one shared library. Cached by the
    sources' and flags' hash (a fresh machine always builds). Returns {lib, build_s, cached, kernels, shards}."""
    jobs = jobs or os.cpu_count() or 1
    parts = shards(insts, jobs)
    texts = [source(p) for p in parts]
    digest = hashlib.sha256("\0".join([*texts, *NVCC_FLAGS]).encode()).hexdigest()[:16]
    build_dir = build_dir or Path(tempfile.gettempdir()) / f"conv_direct_sweep_{digest}"
    build_dir.mkdir(parents=True, exist_ok=True)
    lib = build_dir / "libconv_direct_sweep.so"
    report_path = build_dir / "report.json"
    if lib.exists() and report_path.exists():
        return {**json.loads(report_path.read_text()), "lib": str(lib), "cached": True}
    t0 = time.perf_counter()

    def one(j: int):
        src, obj = build_dir / f"shard{j}.cu", build_dir / f"shard{j}.o"
        src.write_text(texts[j])
        return nvcc_compile(src, obj, "-c", "-Xcompiler", "-fPIC")

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        done = list(pool.map(one, range(len(parts))))
    for j, (proc, _) in enumerate(done):
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc failed on shard {j}:\n{(proc.stdout + proc.stderr)[-4000:]}")
    link = subprocess.run(["nvcc", "-shared", "-o", str(lib), *(str(build_dir / f"shard{j}.o") for j in range(len(parts)))],
                          capture_output=True, text=True, timeout=300)
    if link.returncode != 0:
        raise RuntimeError(f"linking failed:\n{(link.stdout + link.stderr)[-4000:]}")
    report = {"build_s": time.perf_counter() - t0, "jobs": jobs, "nvcc_flags": list(NVCC_FLAGS),
              "shards": [{"insts": [i.name for i in p], "compile_s": s} for p, (_, s) in zip(parts, done)],
              "kernels": [k for proc, _ in done for k in parse_ptxas(proc.stdout + proc.stderr)]}
    report_path.write_text(json.dumps(report, indent=1))
    return {**report, "lib": str(lib), "cached": False}


# ---- measuring (in a worker process) ---------------------------------------------------------------------

def _launcher(lib, inst: Inst):
    fn = getattr(lib, f"ffsweep_{inst.name}")
    fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


def measure(shape: Shape, lib, args) -> dict:
    import torch
    import torch.nn.functional as F

    p = plan(shape)
    g = shape.geometry()
    d = shape.dims
    row = {**describe(shape), "gflop": shape.gflop, "out_gb": shape.out_bytes / 1e9,
           "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32, "cudnn_benchmark_default": torch.backends.cudnn.benchmark}
    fconv = F.conv2d if d == 2 else F.conv3d
    stride, padding = shape.stride3[3 - d:], shape.padding3[3 - d:]
    torch.manual_seed(0)
    x = torch.randn(shape.x_shape, device="cuda")
    bound = 1.0 / math.sqrt(shape.dot)
    w = torch.empty([shape.k, shape.c, *shape.window[3 - d:]], device="cuda").uniform_(-bound, bound)
    b = torch.empty(shape.k, device="cuda").uniform_(-bound, bound)
    cb = min(args.check_batch, g.n)
    ms, err = {}, {}
    flush = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    with torch.no_grad():
        truth = fconv(x[:cb].double(), w.double(), b.double(), stride, padding)
        if p["inst"] is not None:
            fn = _launcher(lib, p["inst"])
            geom = (ctypes.c_int * 18)(*g.ints())
            y = torch.full(shape.out_shape, float("nan"), device="cuda")

            def ours():
                rc = fn(x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), geom,
                        torch.cuda.current_stream().cuda_stream)
                if rc:
                    raise RuntimeError(f"ffsweep_{p['inst'].name} returned cudaError {rc}")

            ours()
            torch.cuda.synchronize()
            row["nan_ours"] = int(torch.isnan(y).sum().item())
            err["ours"] = bench._rel_err(y[:cb], truth)
            ms["ours"] = bench.timed(ours, args.reps, flush)
            del y
        yc = fconv(x, w, b, stride, padding)
        err["cudnn"] = bench._rel_err(yc[:cb], truth)
        del yc
        ms["cudnn"] = bench.timed(lambda: fconv(x, w, b, stride, padding), args.reps, flush)
        if not args.no_cudnn_benchmark:
            torch.backends.cudnn.benchmark = True
            try:
                t0 = time.perf_counter()
                yc = fconv(x, w, b, stride, padding)
                torch.cuda.synchronize()
                row["cudnn_autotune_s"] = time.perf_counter() - t0
                err["cudnn_benchmark"] = bench._rel_err(yc[:cb], truth)
                del yc
                ms["cudnn_benchmark"] = bench.timed(lambda: fconv(x, w, b, stride, padding), args.reps, flush)
            finally:
                torch.backends.cudnn.benchmark = False
    row["ms"] = ms
    row["err"] = err
    row["tflops"] = {key: shape.gflop / v for key, v in ms.items()}  # GFLOP / ms = TFLOP/s
    if "ours" in ms:
        row["speedup_vs_cudnn"] = ms["cudnn"] / ms["ours"]
        if "cudnn_benchmark" in ms:
            row["speedup_vs_cudnn_benchmark"] = ms["cudnn_benchmark"] / ms["ours"]
        row["ours_ok"] = bool(err["ours"] <= TOL and row["nan_ours"] == 0)
    row["peak_mem_gb"] = torch.cuda.max_memory_allocated() / 1e9
    return row


def _worker(args) -> int:
    """Measure the job's shapes in order, one JSON line each; stop before a shape that would pass the deadline;
    exit 3 after a failed shape (the CUDA context may be unusable: the driver starts a new worker)."""
    import torch

    job = json.loads(Path(args.worker).read_text())
    lib = ctypes.CDLL(job["lib"])
    by_name = {s.name: s for s in grid()}
    durations: list[float] = []
    with open(args.worker_out, "a") as out:
        for name in job["shapes"]:
            left = job["deadline"] - time.time()
            expect = 1.5 * max(durations[-3:], default=job.get("first_estimate_s", 10.0))
            if left < expect:
                out.write(json.dumps({"name": name, "stopped": f"budget: {left:.0f} s left, a shape takes ~{expect:.0f} s"})
                          + "\n")
                return 0
            t0 = time.perf_counter()
            try:
                row = {"name": name, **measure(by_name[name], lib, args)}
                status = 0
            except Exception as exc:  # noqa: BLE001 - reported in the JSON
                import traceback

                row = {"name": name, "error": repr(exc), "traceback": traceback.format_exc()[-3000:]}
                status = 3
            row["wall_s"] = time.perf_counter() - t0
            durations.append(row["wall_s"])
            out.write(json.dumps(row) + "\n")
            out.flush()
            if status:
                return status
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    return 0


def run_workers(names: list[str], lib: str, args, deadline: float) -> tuple[dict, dict]:
    """Measure `names` in worker processes (a new one after a fault). Returns ({name: row}, {name: why skipped})."""
    results: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    todo = list(names)
    with tempfile.TemporaryDirectory() as tmp:
        while todo:
            if deadline - time.time() < 15:
                skipped.update({n: "budget: no time left to start a worker" for n in todo})
                break
            job_path, out_path = Path(tmp) / "job.json", Path(tmp) / "out.jsonl"
            job_path.write_text(json.dumps({"lib": lib, "shapes": todo, "deadline": deadline}))
            out_path.write_text("")
            cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(job_path), "--worker-out",
                   str(out_path), "--reps", str(args.reps), "--check-batch", str(args.check_batch)]
            if args.no_cudnn_benchmark:
                cmd.append("--no-cudnn-benchmark")
            why = None
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(30.0, deadline - time.time() + 20))
                if proc.returncode not in (0, 3):
                    why = f"worker exited {proc.returncode}: {proc.stderr[-2000:]}"
            except subprocess.TimeoutExpired:
                why = "worker timed out (hang?)"
            for line in out_path.read_text().splitlines():
                row = json.loads(line)
                if "stopped" in row:
                    skipped.update({n: row["stopped"] for n in todo if n not in results})
                    todo = []
                    break
                results[row["name"]] = row
                print(_line(row), flush=True)
            todo = [n for n in todo if n not in results and n not in skipped]
            if why and todo:  # the shape it was on when it died
                results[todo[0]] = {"name": todo[0], "error": why}
                print(_line(results[todo[0]]), flush=True)
                todo = todo[1:]
    return results, skipped


# ---- driver ------------------------------------------------------------------------------------------------

def describe(shape: Shape) -> dict:
    p = plan(shape)
    return {"name": shape.name, "dims": shape.dims, "c": shape.c, "k": shape.k,
            "window": list(shape.window[3 - shape.dims:]), "stride": shape.stride, "padding": shape.padding,
            "dot": shape.dot, "x_shape": list(shape.x_shape), "out_shape": list(shape.out_shape),
            "tiling": p["tiling"], "no_tiling_reason": p["reason"], "smem_bytes": p["smem_bytes"],
            "useful_fraction": p["useful_fraction"], "inst": p["inst"].name if p["inst"] else None}


def _line(r: dict) -> str:
    head = f"{r['name']:<24}"
    if "error" in r:
        return f"{head} FAILED: {r['error'][:300]}"
    ms, err, tf = r["ms"], r["err"], r["tflops"]
    bm = (f" cudnn_bm {ms['cudnn_benchmark']:.3f} ({tf['cudnn_benchmark']:.1f} TF/s, err {err['cudnn_benchmark']:.1e})"
          if "cudnn_benchmark" in ms else "")
    if "ours" not in ms:
        return f"{head} no tiling ({r.get('no_tiling_reason')}) | cudnn {ms['cudnn']:.3f} ms ({tf['cudnn']:.1f} TF/s){bm}"
    return (f"{head} dot {r['dot']:>3} ours {ms['ours']:.3f} ms ({tf['ours']:.1f} TF/s) cudnn {ms['cudnn']:.3f} "
            f"({tf['cudnn']:.1f} TF/s){bm} | x{r['speedup_vs_cudnn']:.2f} vs cudnn | err ours {err['ours']:.1e} "
            f"cudnn {err['cudnn']:.1e} nan {r['nan_ours']} {'ok' if r['ours_ok'] else 'WRONG'}")


def dry_run(shapes: list[Shape]) -> None:
    insts = instantiations(shapes)
    print(f"{len(shapes)} shapes ({sum(s.dims == 2 for s in shapes)} 2-D, {sum(s.dims == 3 for s in shapes)} 3-D), "
          f"dot lengths {min(s.dot for s in shapes)}-{max(s.dot for s in shapes)}")
    for s in shapes:
        e = describe(s)
        t = e["tiling"]
        tl = f"kpt{t['kpt']} wk{t['wk']} wh{t['wh']} ph{t['ph']} (BK {t['block_k']}, TH {t['tile_h']})" if t else "-"
        what = e["inst"] or f"NONE: {e['no_tiling_reason']}"
        smem = f"{e['smem_bytes'] / 1024:.1f} KB" if e["smem_bytes"] else "-"
        print(f"  {s.name:<24} dot {s.dot:>3} x{list(s.x_shape)} -> {list(s.out_shape)} {s.out_bytes / 1e9:.2f} GB "
              f"{s.gflop:.0f} GFLOP | {tl} smem {smem} | {what}")
    print(f"{len(insts)} instantiations in {len(shards(insts, os.cpu_count() or 1))} .cu files "
          f"({os.cpu_count()} nvcc jobs):")
    for i in insts:
        users = [s.name for s in shapes if plan(s)["inst"] == i]
        print(f"  ffsweep_{i.name}  launch<{', '.join(str(v).lower() for v in i.args)}>  {len(users)} shapes")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--out", type=Path, help="JSON results")
    parser.add_argument("--dry-run", action="store_true", help="print the grid and the instantiations; no CUDA")
    parser.add_argument("--shapes", default=None, help="regex: only shapes whose name matches (e.g. '^2d_c8')")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--check-batch", type=int, default=2, help="images checked against float64")
    parser.add_argument("--no-cudnn-benchmark", action="store_true", help="skip the cudnn.benchmark=True timing")
    parser.add_argument("--budget", type=float, default=230.0,
                        help="seconds for the whole run, build included: no new shape starts when one would not "
                             "finish in time (the skipped ones are recorded in meta.skipped)")
    parser.add_argument("--jobs", type=int, default=None, help="parallel nvcc processes (default: CPU count)")
    parser.add_argument("--build-dir", type=Path, default=None)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args)
    t0 = time.time()
    shapes = [s for s in grid() if args.shapes is None or re.search(args.shapes, s.name)]
    if args.dry_run:
        dry_run(shapes)
        return 0
    insts = instantiations(shapes)
    meta: dict = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                  "tol": TOL, "smem_limit": tiling.SMEM_LIMIT, "instantiations": [i.name for i in insts]}
    meta["commit"] = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                                    text=True).stdout.strip()
    meta["nvcc"] = (subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()
                    or [""])[-1] if shutil.which("nvcc") else None
    results: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    try:
        built = build(insts, args.build_dir, args.jobs)
        meta["build"] = {k: v for k, v in built.items() if k != "kernels"}
        meta["kernels"] = built["kernels"]
        print(f"built {len(insts)} instantiations ({len(built['kernels'])} kernels) in {built['build_s']:.1f} s"
              f"{' (cached)' if built['cached'] else ''}; max registers "
              f"{max((k['registers'] or 0) for k in built['kernels'])}, spill bytes "
              f"{sum((k['spill_stores'] or 0) + (k['spill_loads'] or 0) for k in built['kernels'])}", flush=True)
        results, skipped = run_workers([s.name for s in shapes], built["lib"], args, t0 + args.budget - 5)
    except Exception as exc:  # noqa: BLE001
        print(f"build failed: {exc}", flush=True)
        meta["build_error"] = str(exc)
    import torch

    meta.update(torch=torch.__version__, cuda=torch.version.cuda,
                gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None)
    regs = {k["inst"]: k for k in meta.get("kernels", []) if "inst" in k}
    rows = []
    for s in shapes:
        row = {**describe(s), **results.get(s.name, {})}
        if s.name in skipped:
            row["skipped"] = skipped[s.name]
        if row["inst"] in regs:
            row["ptxas"] = {k: regs[row["inst"]][k] for k in ("registers", "spill_stores", "spill_loads")}
        rows.append(row)
    meta["skipped"] = sorted(skipped)
    meta["total_s"] = time.time() - t0
    wrong = [r["name"] for r in rows if r["inst"] and _reached(r) and not r.get("ours_ok")]
    meta["ours_wrong"] = wrong
    measured = [r for r in rows if "speedup_vs_cudnn" in r]
    faster = [r for r in measured if r["speedup_vs_cudnn"] > 1]
    summary = (f"{len(rows)} shapes: {len(measured)} with ours measured, ours faster than cuDNN on {len(faster)} "
               f"(dot lengths {sorted({r['dot'] for r in faster})}); {len(skipped)} skipped; "
               f"{len(wrong)} of ours wrong{': ' + ', '.join(wrong) if wrong else ''}; {meta['total_s']:.0f} s")
    meta["summary"] = summary
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"meta": meta, "results": rows}, indent=1))
    print(summary, flush=True)
    return 1 if wrong or "build_error" in meta else 0


def _reached(row: dict) -> bool:
    """Whether a worker got to this shape (measured it or failed on it)."""
    return "ms" in row or "error" in row


if __name__ == "__main__":
    sys.exit(main())
