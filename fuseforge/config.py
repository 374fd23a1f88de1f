"""The one typed configuration of a fuseforge run; every default lives here."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from .families import NAMES, named


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
    # The kernel families turned on, by their names in the registry (fuseforge/families), each with the pointwise
    # neighbours it fuses; a plan with them that fails a check falls back to a simpler one (fuseforge/ladder.py).
    families: frozenset[str] = frozenset(NAMES)
    # The simpler rungs of the ladder of plans (fuseforge/ladder.py) turn these off one by one.
    layout: bool = True  # convolutions whose readers all read channels-last run channels-last
    pointwise_kernels: bool = True  # chains of pointwise ops become generated kernels
    rewrites: bool = True  # algebraic identities (stage rewrite)
    capture: bool = True  # False: ModelNew runs the model's own forward (when even capture failed)
    # Every anchor a kernel can take becomes that kernel, whatever the cost model expects (for testing the kernels,
    # such as a fuzz campaign's small odd shapes, where the cost model keeps cuDNN or cuBLAS).
    every_kernel: bool = False

    def __post_init__(self) -> None:
        named(*self.families)  # a name that is no family's is an error, not a family silently left off

    def without_families(self) -> OptimizeConfig:
        return replace(self, families=frozenset())

    def without_family(self, name: str) -> OptimizeConfig:
        return replace(self, families=self.families - {name})

    def without(self, *switches: str) -> OptimizeConfig:
        """Without these boolean switches (layout, pointwise_kernels, rewrites, capture)."""
        return replace(self, **dict.fromkeys(switches, False))
