"""`fuseforge optimize`: load > capture > rewrite > partition > codegen > emit > verify > bench > report.

Each stage is a function of the run so far that writes one numbered artefact into the output folder:
00_captured.txt, 10_rewritten.txt, 20_partition.txt, 30_kernels/, 40_model_new.py, 50_verify.json,
60_bench.json, report.md; and model_new.py only once the GPU verified it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .capture import Captured, capture, format_captured
from .codegen import Extension, generate
from .config import OptimizeConfig
from .cost import CostEstimate, EagerCost, eager_cost, estimate
from .cpu_check import CpuCheck, check_emitted_on_cpu, check_on_cpu, float64_reference
from .emit import EmitContext, emit
from .layout import channels_last_convs
from .load import LoadedModel, load_model_file
from .partition import Plan, format_plan, partition
from .report import write_report
from .rewrite import RewriteLog, format_rewrite, rewrite


@dataclass
class Run:
    config: OptimizeConfig
    loaded: LoadedModel | None = None
    captured: Captured | None = None
    rewrites: RewriteLog | None = None
    plan: Plan | None = None
    extension: Extension | None = None
    eager_cost: EagerCost | None = None  # taken before the rewrite
    cost: CostEstimate | None = None
    cpu_check: CpuCheck | None = None
    verify: dict | None = None  # 50_verify.json
    bench: dict | None = None  # 60_bench.json
    notes: list[str] = field(default_factory=list)

    def artefact(self, name: str) -> Path:
        return self.config.out_dir / name

    @property
    def verified(self) -> bool:
        return bool(self.verify and self.verify.get("verdict") == "correct")


class StageFailed(Exception):
    """A stage could not do its work; the message says why in one line."""

    def __init__(self, message: str, stage: str = "", reason: str = ""):
        super().__init__(message)
        self.stage, self.reason = stage, reason or message


def stage_load(run: Run) -> None:
    run.loaded = load_model_file(run.config.model_path)


def stage_capture(run: Run) -> None:
    run.captured = capture(run.loaded)
    run.eager_cost = eager_cost(run.captured)
    run.artefact("00_captured.txt").write_text(format_captured(run.captured))


def stage_rewrite(run: Run) -> None:
    run.rewrites = rewrite(run.captured.graph, run.captured)
    run.artefact("10_rewritten.txt").write_text(format_rewrite(run.rewrites, format_captured(run.captured)))


def stage_partition(run: Run) -> None:
    run.plan = partition(run.captured.graph, row_kernels=run.config.row_kernels,
                         channel_kernels=run.config.channel_kernels, gemm_kernels=run.config.gemm_kernels)
    run.plan.channels_last = channels_last_convs(run.plan, run.captured.graph)
    run.artefact("20_partition.txt").write_text(format_plan(run.plan))
    run.cost = estimate(run.eager_cost, run.captured, run.plan)


def stage_codegen(run: Run) -> None:
    run.extension = generate(run.plan, run.captured.graph, run.loaded.path.name)
    folder = run.artefact("30_kernels")
    folder.mkdir(exist_ok=True)
    (folder / "kernels.cu").write_text(run.extension.cuda)
    (folder / "binding.cpp").write_text(run.extension.binding)


def stage_emit(run: Run) -> None:
    ctx = EmitContext(run.captured, run.plan, run.extension, run.loaded.path.name, run.loaded.source,
                      run.loaded.init_args, run.loaded.output_is_tuple)
    run.artefact("40_model_new.py").write_text(emit(ctx))


def extra_batch_size(run: Run) -> int:
    """A second batch size for verification (odd, about half), when the batch size is symbolic."""
    if not run.captured.dynamic_batch:
        return 0
    return max(2, run.loaded.inputs[0].shape[0] // 2 + 1)


def _check_on_cpu(run: Run) -> None:
    """The plan, then the emitted forward, against one float64 run of the model on the CPU."""
    ref = float64_reference(run.loaded, run.captured)
    plan = check_on_cpu(run.captured, run.plan, ref)
    emitted = check_emitted_on_cpu(run.loaded, run.captured, run.plan, run.artefact("40_model_new.py"), ref)
    run.cpu_check = CpuCheck(plan.passed and emitted.passed, max(plan.max_rel_error, emitted.max_rel_error),
                             plan.detail + emitted.detail)
    if not run.cpu_check.passed:
        raise StageFailed("CPU check failed: the program differs from the model in float64: "
                          + "; ".join(d for d in run.cpu_check.detail if "error 0.0e+00" not in d))


def stage_verify(run: Run) -> None:
    """CPU checks; then, on a GPU, verification and benchmark in one child process (one extension load)."""
    _check_on_cpu(run)
    if not run.config.gpu:
        return
    c = run.config
    cmd = [sys.executable, "-m", "fuseforge.evaluate", str(c.model_path), str(run.artefact("40_model_new.py")),
           "--out", str(c.out_dir), "--device", "cuda", "--seeds", str(c.seeds), "--trials", str(c.trials),
           "--warmup", str(c.warmup), "--tolerance-factor", str(c.tolerance_factor),
           "--extra-batch", str(extra_batch_size(run))]
    if not c.compile_baseline:
        cmd.append("--no-compile")
    if c.max_autotune_baseline:
        cmd.append("--max-autotune")
    log = run.artefact("50_evaluate.log")
    try:
        with log.open("w") as fh:
            subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=c.gpu_timeout_s,
                           env={**os.environ, "PYTHONUNBUFFERED": "1"})
    except subprocess.TimeoutExpired:
        raise StageFailed(f"GPU evaluation timed out after {c.gpu_timeout_s} s (log: {log})") from None
    verify_file = run.artefact("50_verify.json")
    if not verify_file.exists():
        raise StageFailed(f"GPU evaluation wrote no verdict (log: {log})")
    run.verify = json.loads(verify_file.read_text())
    if not run.verified:
        raise StageFailed(f"verification failed: {run.verify.get('verdict')}: {run.verify.get('reason')}")
    shutil.copyfile(run.artefact("40_model_new.py"), run.artefact("model_new.py"))


def stage_bench(run: Run) -> None:
    """Read the benchmark the evaluation process ran right after verifying (60_bench.json)."""
    if not run.config.gpu:
        return
    bench_file = run.artefact("60_bench.json")
    run.bench = json.loads(bench_file.read_text()) if bench_file.exists() else None
    if run.bench is None:
        run.notes.append("benchmark did not run (see 50_evaluate.log)")


def stage_report(run: Run) -> None:
    write_report(run, run.artefact("report.md"))


STAGES: list[tuple[str, Callable[[Run], None]]] = [
    ("load", stage_load),
    ("capture", stage_capture),
    ("rewrite", stage_rewrite),
    ("partition", stage_partition),
    ("codegen", stage_codegen),
    ("emit", stage_emit),
    ("verify", stage_verify),
    ("bench", stage_bench),
    ("report", stage_report),
]


FAMILY_STAGES = ("partition", "codegen", "emit", "verify")  # stages whose outcome depends on the kernel families
FIRST_ATTEMPT = "with_families"  # where the artefacts of a failed plan with kernel families are kept


def optimize(config: OptimizeConfig, on_stage: Callable[[str], None] = lambda name: None) -> Run:
    """Run every stage. If a stage that depends on the kernel families fails, the plan without them is tried
    (the first attempt's artefacts kept in OUT/with_families/); otherwise a failing stage stops the run, and
    the report is still written if possible."""
    try:
        return _run_stages(config, on_stage)
    except StageFailed as exc:
        if not config.families or exc.stage not in FAMILY_STAGES:
            raise
        kept = _set_aside(config.out_dir, FIRST_ATTEMPT)
        on_stage(f"fallback without {', '.join(config.families)}")
        note = (f"The plan with the kernel families ({', '.join(config.families)}) failed at {exc.stage}: "
                f"{exc.reason}. This is the plan without them; the first attempt's artefacts are in {kept}/.")
        return _run_stages(config.without_families(), on_stage, [note])


def _set_aside(out_dir: Path, name: str) -> Path:
    """Move every artefact of OUT into OUT/NAME (replacing an older one)."""
    kept = out_dir / name
    shutil.rmtree(kept, ignore_errors=True)
    kept.mkdir()
    for path in out_dir.iterdir():
        if path != kept:
            shutil.move(str(path), str(kept / path.name))
    return kept


def _run_stages(config: OptimizeConfig, on_stage: Callable[[str], None], notes: list[str] | None = None) -> Run:
    config.out_dir.mkdir(parents=True, exist_ok=True)
    run = Run(config, notes=list(notes or []))
    for name, stage in STAGES:
        on_stage(name)
        try:
            stage(run)
        except Exception as exc:
            run.notes.append(f"stage {name} failed: {exc}")
            if name != "report" and run.plan is not None:
                _try_report(run)
            raise StageFailed(f"{name}: {exc}", stage=name, reason=str(exc)) from exc
    return run


def _try_report(run: Run) -> None:
    try:
        write_report(run, run.artefact("report.md"))
    except Exception as exc:  # the report of a failed run is best effort; the failure is what matters
        run.notes.append(f"report could not be written: {exc}")
