"""The one typed configuration of a fuseforge run; every default lives here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class OptimizeConfig:
    model_path: Path
    out_dir: Path
    gpu: bool = True  # False: stop after the CPU-side checks
    gpu_skip_reason: str = "--no-gpu"  # why the GPU stages did not run, for the report
    seeds: int = 3  # fresh seeds for verification (each with two input distributions)
    trials: int = 50  # timed calls per variant
    warmup: int = 5
    tolerance_factor: float = 2.0  # candidate error vs fp64 may be this many times eager fp32's
    compile_baseline: bool = True  # also time torch.compile (default mode)
    max_autotune_baseline: bool = False  # also time torch.compile(mode="max-autotune"): minutes per model
    gpu_timeout_s: int = 1800  # build + verify + bench, in a child process
    row_kernels: bool = False  # also fuse last-axis reductions and norms with their neighbours (opt-in until measured)
    channel_kernels: bool = False  # also fuse train-mode batch norms with their neighbours (opt-in until measured)
    gemm_kernels: bool = False  # also run float32 GEMMs with their pointwise epilogue as 3xTF32 kernels (opt-in)
