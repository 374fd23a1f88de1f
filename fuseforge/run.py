"""One `optimize` run: its configuration and what each stage produced so far (the report reads it)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .capture import Captured
from .codegen import Extension
from .config import OptimizeConfig
from .cost import CostEstimate, EagerCost
from .evaluate.cpu_check import CpuCheck
from .load import LoadedModel
from .plan import Plan
from .rewrite import RewriteLog


@dataclass
class Run:
    config: OptimizeConfig
    loaded: LoadedModel | None = None
    captured: Captured | None = None
    rewrites: RewriteLog | None = None
    plan: Plan | None = None
    extension: Extension | None = None
    eager_cost: EagerCost | None = None  # taken before the rewrite
    token_kernels: str | None = None  # why the plan's kernels do none of the model's work (the partition fails)
    model_ops: Counter = field(default_factory=Counter)  # the captured graph's compute ops, before the rewrite
    cost: CostEstimate | None = None
    cpu_check: CpuCheck | None = None
    verify: dict | None = None  # 50_verify.json
    bench: dict | None = None  # 60_bench.json
    notes: list[str] = field(default_factory=list)
    ladder: list[str] = field(default_factory=list)  # the rungs of the ladder of plans left before this one
    conv_precision: dict = field(default_factory=dict)  # layout_precision: convolution -> its measurement

    def artefact(self, name: str) -> Path:
        return self.config.out_dir / name

    @property
    def verified(self) -> bool:
        return bool(self.verify and self.verify.get("verdict") == "correct")
