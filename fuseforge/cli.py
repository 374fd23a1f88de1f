"""The `fuseforge` command line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from .config import OptimizeConfig
from .family_switches import family_switches

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Compile a PyTorch model file into fused CUDA kernels, verify them and explain them.")
console = Console(stderr=True)


@app.callback()
def main() -> None:
    """fuseforge: fused CUDA kernels for PyTorch models, verified against float64 and benchmarked."""


@app.command()
@family_switches
def optimize(
    model: Annotated[Path, typer.Argument(
        help="A model file: class Model(nn.Module), get_inputs(), get_init_inputs().")],
    out: Annotated[Path | None, typer.Option(
        "-o", "--out", help="Output folder (default: out/<model name>).")] = None,
    no_gpu: Annotated[bool, typer.Option(
        "--no-gpu", help="Stop after the CPU-side checks (no build, verify, bench).")] = False,
    seeds: Annotated[int, typer.Option(
        help="Fresh seeds for GPU verification (each with two input distributions).")] = 3,
    trials: Annotated[int, typer.Option(help="Timed calls per variant in the benchmark.")] = 50,
    no_compile: Annotated[bool, typer.Option(
        "--no-compile", help="Do not time torch.compile as a baseline.")] = False,
    max_autotune: Annotated[bool, typer.Option(
        "--max-autotune", help="Also time torch.compile(mode='max-autotune') as a baseline "
                               "(adds minutes of autotuning per model).")] = False,
    every_kernel: Annotated[bool, typer.Option(
        "--every-kernel", help="Make every anchor a kernel can take that kernel, whatever the cost model expects "
                               "(for testing the kernels; the plan may be slower).")] = False,
    *,
    families: frozenset[str],  # the families left on by the family switches (family_switches.py)
) -> None:
    """Write OUT/model_new.py (a standalone ModelNew with fused CUDA kernels) and OUT/report.md.

    Stages: load, capture, rewrite, partition, codegen, emit, verify, bench, report. Each writes a numbered
    artefact into OUT; model_new.py is written only after it passed verification on the GPU.

    Exit code 0: a verified ModelNew was written (without a GPU, or with --no-gpu: the CPU-side checks
    passed and the GPU stages are reported as not run).
    """
    import torch

    from .pipeline import STAGES, StageFailed
    from .pipeline import optimize as run_pipeline

    out = out or Path("out") / model.stem
    gpu, skip_reason = not no_gpu, "--no-gpu"
    if gpu and not torch.cuda.is_available():
        gpu, skip_reason = False, "no CUDA GPU on this machine"
        console.print("[yellow]no CUDA GPU on this machine: running the CPU-side stages only (as --no-gpu)[/]")
    config = OptimizeConfig(model_path=model.resolve(), out_dir=out, gpu=gpu, gpu_skip_reason=skip_reason,
                            seeds=seeds, trials=trials, compile_baseline=not no_compile, max_autotune_baseline=max_autotune,
                            families=families, every_kernel=every_kernel)
    names = [name for name, _ in STAGES]
    with console.status("starting") as status:
        def on_stage(name: str) -> None:
            where = f"stage {names.index(name) + 1}/{len(names)}" if name in names else "again"
            status.update(f"[bold]{name}[/] ({where}) {model.name}")
            console.log(f"{name} …")

        try:
            run = run_pipeline(config, on_stage)
        except StageFailed as exc:
            console.print(f"[red]fuseforge: {model.name}: {exc}[/]")
            report = out / "report.md"
            if report.exists():
                console.print(f"report (of the failed run): {report}")
            raise typer.Exit(1) from None
    if run.verified:
        console.print(f"[green]verified[/]: {out / 'model_new.py'}")
    elif run.cpu_check is not None and run.cpu_check.skipped:
        console.print(f"[yellow]GPU steps not run ({config.gpu_skip_reason}); {run.cpu_check.skipped}[/]: "
                      f"unchecked candidate at {out / '40_model_new.py'}")
    else:
        console.print(f"[yellow]GPU steps not run ({config.gpu_skip_reason}); CPU-side checks passed[/]: "
                      f"candidate at {out / '40_model_new.py'}")
    console.print(f"report: {out / 'report.md'}")
    print(out / "report.md")


from .check.cli import register as register_check  # noqa: E402  (commands defined in their own packages)
from .fuzz.cli import register as register_fuzz  # noqa: E402
from .suite.cli import register as register_suite  # noqa: E402

register_check(app)
register_suite(app)
register_fuzz(app)


if __name__ == "__main__":
    app()
