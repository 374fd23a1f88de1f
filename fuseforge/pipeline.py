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
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from .capture import capture, format_captured
from .codegen import KernelCodegenError, generate
from .config import OptimizeConfig
from .cost import compute_ops, eager_cost, estimate
from .emit import EmitContext, emit, emit_model_forward
from .evaluate.cpu_check import (
    CpuCheck,
    available_bytes,
    check_emitted_on_cpu,
    check_on_cpu,
    float64_check_bytes,
    float64_reference,
)
from .evaluate.harness import batch_sizes
from .families import switched_on
from .ladder import Failure, describe, next_rung, second_opinion, token_kernels
from .layout import channels_last_convs
from .layout_precision import graph_convolutions, kept_channels_last, measured_or_error, put_on_nodes
from .load import load_model_file
from .partition import format_plan, partition
from .plan import Plan
from .report import write_report
from .rewrite import format_rewrite, rewrite, run_rules
from .run import Run


class StageFailed(Exception):
    """A stage could not do its work; the message says why in one line. `family`: the kernel family the
    failure is attributed to, when it is known; `run`: the run so far."""

    def __init__(self, message: str, stage: str = "", reason: str = "", family: str | None = None,
                 run: Run | None = None):
        super().__init__(message)
        self.stage, self.reason, self.family, self.run = stage, reason or message, family, run


def stage_load(run: Run) -> None:
    run.loaded = load_model_file(run.config.model_path)


def stage_capture(run: Run) -> None:
    run.captured = capture(run.loaded)
    run.eager_cost = eager_cost(run.captured)
    run.model_ops = compute_ops(run.captured.graph)  # before the rewrites change the graph
    run.artefact("00_captured.txt").write_text(format_captured(run.captured))


def stage_rewrite(run: Run) -> None:
    run.rewrites = rewrite(run.captured.graph, run.captured) if run.config.rewrites else \
        run_rules(run.captured.graph, [], None)
    run.artefact("10_rewritten.txt").write_text(format_rewrite(run.rewrites, format_captured(run.captured)))


def stage_partition(run: Run) -> None:
    c, graph = run.config, run.captured.graph
    families = switched_on(c)
    convs = graph_convolutions(graph)
    if c.gpu and convs:  # every convolution measured once (one child process): the layout and the cost use it
        run.conv_precision = measured_or_error(convs, graph, c.out_dir)
        if "error" in run.conv_precision:
            run.notes.append(f"the convolutions could not be measured ({run.conv_precision['error']}): they run in "
                             "eager's layout, priced by the cost model's rates")
        else:
            put_on_nodes(graph, run.conv_precision)
    if c.gpu:  # what a family's claim needs measured on the GPU (the conv kernels: eager's precision class)
        for family in families:
            run.notes.extend(family.measure_on_gpu(graph, c.out_dir))
    elif c.every_kernel:  # no GPU: what a family would measure is assumed, so that every kernel is generated
        for family in families:
            run.notes.extend(family.assume_unmeasured(graph))
    run.plan = partition(graph, families, c.pointwise_kernels, c.every_kernel)
    if c.every_kernel:
        run.notes.append("every anchor a kernel can take is that kernel (--every-kernel): the cost model did not "
                         "choose between the kernels and cuDNN or cuBLAS")
    if c.layout:
        run.plan.channels_last = channels_last_convs(run.plan, graph)
        if c.gpu and convs:  # channels-last only where measured in class and faster
            run.plan.channels_last = kept_channels_last(run.plan.channels_last, run.conv_precision, graph)
    run.artefact("20_partition.txt").write_text(format_plan(run.plan))
    run.cost = estimate(run.eager_cost, run.captured, run.plan, run.conv_precision)
    run.token_kernels = token_kernels(run.model_ops, run.plan, run.captured.graph)
    if run.token_kernels:  # a plan whose kernels do none of the model's work is no answer to "replace its operators"
        raise ValueError(run.token_kernels)


def stage_codegen(run: Run) -> None:
    run.extension = generate(run.plan, run.captured.graph, run.loaded.path.name)
    folder = run.artefact("30_kernels")
    folder.mkdir(exist_ok=True)
    (folder / "kernels.cu").write_text(run.extension.cuda)
    (folder / "binding.cpp").write_text(run.extension.binding)


def stage_emit_model_forward(run: Run) -> None:
    """The ladder's last rung: a ModelNew that runs the model's own forward (nothing captured)."""
    loaded = run.loaded
    run.artefact("40_model_new.py").write_text(emit_model_forward(loaded.path.name, loaded.source, loaded.init_args))


def stage_emit(run: Run) -> None:
    ctx = EmitContext(run.captured, run.plan, run.extension, run.loaded.path.name, run.loaded.source,
                      run.loaded.init_args, run.loaded.output_is_tuple)
    run.artefact("40_model_new.py").write_text(emit(ctx))


def extra_batch_sizes(run: Run) -> list[int]:
    """The other batch sizes verification runs at, when the batch size is symbolic: those `check` grades (about
    half, twice the file's, and 1: harness.batch_sizes)."""
    if run.captured is None or not run.captured.dynamic_batch:
        return []
    first = next(x for x in run.loaded.inputs if isinstance(x, torch.Tensor))
    return batch_sizes(first.shape[0], None)


def _forward_size(run: Run) -> tuple[int, float]:
    """(peak bytes of a forward's values in float32 at the file's sizes, the share of the file's batch the float64
    check runs at: 2 of it where the batch is free, as `float64_reference` takes)."""
    peak = run.eager_cost.peak_activation_bytes if run.eager_cost is not None else 0
    first = next((x for x in run.loaded.inputs if isinstance(x, torch.Tensor) and x.dim() > 0), None)
    dynamic = run.captured is not None and run.captured.dynamic_batch and first is not None
    return peak, min(1.0, 2 / first.shape[0]) if dynamic and first.shape[0] > 0 else 1.0


def _check_on_cpu(run: Run) -> None:
    """The plan, then the emitted forward, against one float64 run of the model on the CPU (skipped, with the
    reason, where its float64 copy would not fit in the host's memory: the GPU verification still runs)."""
    need, have = float64_check_bytes(run.loaded, *_forward_size(run)), available_bytes()
    if have is not None and need > have:
        why = (f"float64 CPU check skipped: it needs about {need / 2**30:.1f} GiB of host memory, "
               f"{have / 2**30:.1f} GiB are available")
        run.cpu_check = CpuCheck(True, 0.0, [why], skipped=why)
        run.notes.append(why + (" (checked on the GPU instead)" if run.config.gpu else " (not checked at all: no GPU)"))
        return
    ref = float64_reference(run.loaded, run.captured)
    plan = check_on_cpu(run.captured, run.plan, ref) if run.plan is not None else CpuCheck(True, 0.0, [])
    emitted = check_emitted_on_cpu(run.loaded, run.captured, run.plan, run.artefact("40_model_new.py"), ref)
    run.cpu_check = CpuCheck(plan.passed and emitted.passed, max(plan.max_rel_error, emitted.max_rel_error),
                             plan.detail + emitted.detail, plan.culprit)
    if not run.cpu_check.passed:
        family = plan.culprit.family.name if plan.culprit is not None and plan.culprit.family else None
        raise StageFailed("CPU check failed: the program differs from the model in float64: "
                          + "; ".join(d for d in run.cpu_check.detail if "error 0.0e+00" not in d), family=family)


def stage_verify(run: Run) -> None:
    """CPU checks; then, on a GPU, verification and benchmark in one child process (one extension load)."""
    _check_on_cpu(run)
    if not run.config.gpu:
        return
    c = run.config
    cmd = [sys.executable, "-m", "fuseforge.evaluate", str(c.model_path), str(run.artefact("40_model_new.py")),
           "--out", str(c.out_dir), "--device", "cuda", "--seeds", str(c.seeds), "--trials", str(c.trials),
           "--warmup", str(c.warmup), "--tolerance-factor", str(c.tolerance_factor),
           *[arg for size in extra_batch_sizes(run) for arg in ("--extra-batch", str(size))]]
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


MODEL_FORWARD_STAGES: list[tuple[str, Callable[[Run], None]]] = [  # the last rung: nothing is captured
    ("load", stage_load),
    ("emit", stage_emit_model_forward),
    ("verify", stage_verify),
    ("bench", stage_bench),
    ("report", stage_report),
]


ATTEMPTS = "attempts"  # OUT/attempts/<n>_<rung>/: the artefacts of every rung that was left


@dataclass
class Attempt:
    """A rung of the ladder that was tried and left, and why."""

    rung: str
    failure: Failure
    folder: Path


def optimize(config: OptimizeConfig, on_stage: Callable[[str], None] = lambda name: None) -> Run:
    """Run every stage for the default plan, then down the ladder of simpler plans (`ladder.py`) while a
    plan fails a check or runs slower than eager; keep the fastest verified rung. Only a model that cannot
    be loaded ends without a ModelNew; every rung left has its artefacts in OUT/attempts/."""
    attempts: list[Attempt] = []
    slow: list[tuple[float, Run, Attempt]] = []  # verified rungs that ran slower than eager
    rung = config
    while True:
        error = None
        try:
            run = _run_stages(rung, on_stage, attempts)
        except StageFailed as exc:
            if exc.stage == "load":
                raise
            error, run, failure = exc, exc.run, _failure(exc.run, exc.stage, exc.reason, exc.family)
        else:
            slower = _slower_than_eager(run)
            if slower is None:
                return _with_second_opinion(run, rung, attempts, on_stage)
            failure = _failure(run, "bench", slower, verified=True)
        following = next_rung(rung, failure)
        if following is None and not slow and error is not None:
            raise error
        folder = _set_aside(config.out_dir, f"{len(attempts) + 1}_{_slug(describe(rung))}")
        attempts.append(Attempt(describe(rung), failure, folder))
        if failure.verified:
            slow.append((_median_ms(run), run, attempts[-1]))
        if following is None:
            return _keep_fastest(slow, attempts, on_stage)
        on_stage(f"next rung: {describe(following)}")
        rung = following


def _failure(run: Run | None, stage: str, reason: str, family: str | None = None,
             verified: bool = False) -> Failure:
    """Why a rung was left, with what its plan used (the ladder skips rungs that would not change it)."""
    plan = run.plan if run is not None else None
    firings = run.rewrites.firings if run is not None and run.rewrites is not None else []
    return Failure(stage, reason, family, _families_used(plan),
                   bool(plan is not None and plan.channels_last), bool(plan and plan.groups), bool(firings), verified,
                   rewrites_saved=sum(f.flops_removed for f in firings) > 0 or sum(f.bytes_removed for f in firings) > 0,
                   token=bool(run is not None and run.token_kernels))


def _families_used(plan: Plan | None) -> frozenset[str]:
    return frozenset(g.family.name for g in plan.groups if g.family) if plan is not None else frozenset()


def _with_second_opinion(run: Run, rung: OptimizeConfig, attempts: list[Attempt],
                         on_stage: Callable[[str], None]) -> Run:
    """A verified plan faster than eager but slower than torch.compile, whose matrix kernels replaced cuDNN or
    cuBLAS on the cost model's word: measure the plan without them too and keep the faster of the two (the
    other's artefacts in OUT/attempts/, named in the report). A second plan that fails a check is set aside."""
    behind = _slower_than_compile(run)
    other = second_opinion(rung, _families_used(run.plan)) if behind else None
    if other is None:
        return run
    first = Attempt(describe(rung), replace(_failure(run, "bench", behind, verified=True), outrun_by="torch.compile"),
                    _set_aside(rung.out_dir, f"{len(attempts) + 1}_{_slug(describe(rung))}"))
    on_stage(f"second opinion: {describe(other)} ({behind})")
    try:
        second = _run_stages(other, on_stage, [*attempts, first])
    except StageFailed as exc:
        second, failure = exc.run, _failure(exc.run, exc.stage, exc.reason, exc.family)
    else:
        ms = _median_ms(second)
        failure = None if ms is not None and ms < _median_ms(run) else _failure(
            second, "bench", f"verified, but {'not timed' if ms is None else f'{ms:.3f} ms'} against "
            f"{_median_ms(run):.3f} ms", verified=True)
    if failure is None:  # the library's calls won: the first plan is the one set aside
        attempts.append(replace(first, failure=replace(first.failure, reason=(
            f"verified, but {_median_ms(run):.3f} ms is slower than {_median_ms(second):.3f} ms"),
            outrun_by=f"the plan with {describe(other)}")))
        kept = second
    else:
        attempts.append(Attempt(describe(other), replace(failure, outrun_by=f"the plan with {describe(rung)}"),
                                _set_aside(rung.out_dir, f"{len(attempts) + 2}_{_slug(describe(other))}")))
        _restore(first, rung.out_dir)
        kept = run
    kept.ladder = ladder_notes(attempts) + [
        f"The plan with {describe(rung)} verified, but {behind}: the same plan with cuDNN's and cuBLAS's calls in "
        "place of its conv and GEMM kernels was measured too, and the faster verified one is kept."]
    stage_report(kept)
    return kept


def _behind(run: Run, baseline: str) -> tuple[float, float] | None:
    """(our median ms, the baseline's) where a verified run was slower than the baseline variant of its bench
    ("eager", "compile"); None where it was not, or either was not timed."""
    variants = (run.bench or {}).get("variants", {})
    ours, theirs = variants.get("candidate", {}), variants.get(baseline, {})
    if ours.get("status") != "ok" or theirs.get("status") != "ok" or ours["median_ms"] <= theirs["median_ms"]:
        return None
    return ours["median_ms"], theirs["median_ms"]


def _slower_than_compile(run: Run) -> str | None:
    """Why a verified run is slower than torch.compile (None where it is not, or compile was not timed)."""
    behind = _behind(run, "compile")
    return f"{behind[0]:.3f} ms is slower than torch.compile's {behind[1]:.3f} ms" if behind else None


def _slower_than_eager(run: Run) -> str | None:
    """Why a verified run is slower than eager (None where it is not, or was not timed)."""
    behind = _behind(run, "eager")
    return f"verified, but {behind[0]:.3f} ms is slower than eager's {behind[1]:.3f} ms" if behind else None


def _median_ms(run: Run) -> float | None:
    """The candidate's median time in the run's bench (None where it was not timed)."""
    ours = (run.bench or {}).get("variants", {}).get("candidate", {})
    return ours["median_ms"] if ours.get("status") == "ok" else None


def _restore(attempt: Attempt, out_dir: Path) -> None:
    """A set-aside rung's artefacts back in OUT (the rung is kept after all)."""
    for path in list(attempt.folder.iterdir()):
        shutil.move(str(path), str(out_dir / path.name))
    attempt.folder.rmdir()


def _keep_fastest(slow: list[tuple[float, Run, Attempt]], attempts: list[Attempt],
                  on_stage: Callable[[str], None]) -> Run:
    """No rung was faster than eager: keep the fastest verified one (its artefacts back in OUT)."""
    _, run, attempt = min(slow, key=lambda entry: entry[0])
    on_stage(f"keep the fastest verified rung: {attempt.rung}")
    _restore(attempt, run.config.out_dir)
    attempts.remove(attempt)
    run.ladder = ladder_notes(attempts) + ["No plan ran faster than eager: this is the fastest verified one."]
    stage_report(run)
    return run


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text).strip("-")


def _set_aside(out_dir: Path, name: str) -> Path:
    """Move every artefact of OUT (but earlier attempts) into OUT/attempts/NAME."""
    kept = out_dir / ATTEMPTS / name
    shutil.rmtree(kept, ignore_errors=True)
    kept.mkdir(parents=True)
    for path in out_dir.iterdir():
        if path.name != ATTEMPTS:
            shutil.move(str(path), str(kept / path.name))
    return kept


def ladder_notes(attempts: list[Attempt]) -> list[str]:
    """One line per rung left: which, where it failed and why (with the failing check's numbers)."""
    notes = []
    for a in attempts:
        what = f"was slower than {a.failure.outrun_by}" if a.failure.verified else f"failed at {a.failure.stage}"
        blame = f" (attributed to the {a.failure.family} family)" if a.failure.family else ""
        notes.append(f"The plan with {a.rung} {what}{blame}: {a.failure.reason}. Its artefacts: "
                     f"{ATTEMPTS}/{a.folder.name}/.")
    return notes


def _run_stages(config: OptimizeConfig, on_stage: Callable[[str], None], attempts: list[Attempt] = ()) -> Run:
    config.out_dir.mkdir(parents=True, exist_ok=True)
    run = Run(config, ladder=ladder_notes(list(attempts)))
    for name, stage in STAGES if config.capture else MODEL_FORWARD_STAGES:
        on_stage(name)
        try:
            stage(run)
        except Exception as exc:
            if name == "report":  # the report explains a result, it never decides it
                run.notes.append(f"the report could not be rendered: {type(exc).__name__}: {exc}")
                run.artefact("report.md").write_text(_plain_report(run, exc))
                continue
            run.notes.append(f"stage {name} failed: {exc}")
            if run.plan is not None:
                _try_report(run)
            family = getattr(exc, "family", None) if isinstance(exc, (StageFailed, KernelCodegenError)) else None
            raise StageFailed(f"{name}: {exc}", stage=name, reason=str(exc), family=family, run=run) from exc
    return run


def _plain_report(run: Run, exc: Exception) -> str:
    """What the report must say even when the full one cannot be rendered."""
    verdict = run.verify.get("verdict") if run.verify else "not verified on a GPU"
    return "\n".join([f"# fuseforge report: {run.loaded.path.name}", "",
                      f"The full report could not be rendered ({type(exc).__name__}: {exc}).", "",
                      f"- plan: {describe(run.config)}", f"- verdict: {verdict}",
                      *[f"- {line}" for line in run.ladder], ""])


def _try_report(run: Run) -> None:
    try:
        write_report(run, run.artefact("report.md"))
    except Exception as exc:  # the report of a failed run is best effort; the failure is what matters
        run.notes.append(f"report could not be written: {exc}")
