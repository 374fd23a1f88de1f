"""What the lab's benches share: building a CUDA source into a shared library with nvcc (loaded with ctypes, no
torch extension), and timing a call with CUDA events after an L2 flush (median of reps, three warm-up calls)."""

from __future__ import annotations

import ctypes
import statistics
import subprocess
import tempfile
from pathlib import Path

import torch


def nvcc_library(source: str, name: str, workdir: Path | None = None) -> ctypes.CDLL:
    """Compile `source` for sm_90a into NAME.so (in a fresh temporary folder unless `workdir`) and load it."""
    workdir = Path(workdir or tempfile.mkdtemp())
    cu, so = workdir / f"{name}.cu", workdir / f"{name}.so"
    cu.write_text(source)
    subprocess.run(
        [
            "nvcc",
            "-O3",
            "-shared",
            "-Xcompiler",
            "-fPIC",
            "-gencode=arch=compute_90a,code=sm_90a",
            "-o",
            str(so),
            str(cu),
        ],
        check=True,
    )
    return ctypes.CDLL(str(so))


def timed(fn, reps: int, flush: torch.Tensor) -> float:
    """Median milliseconds of `fn()` over `reps` calls, each after `flush.zero_()`, timed with CUDA events."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)
