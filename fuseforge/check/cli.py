"""`fuseforge check MODEL.py CANDIDATE.py`: the command. `register(app)` adds it to a Typer app."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from fuseforge.evaluate.numerics import FACTOR

EXIT_CORRECT, EXIT_NOT_CORRECT, EXIT_GRADER_ERROR = 0, 1, 2


def check(
    model: Annotated[Path, typer.Argument(help="Model file: class Model, get_inputs(), get_init_inputs().")],
    candidate: Annotated[Path, typer.Argument(help="Candidate file: class ModelNew with Model's interface.")],
    json_path: Annotated[Path | None, typer.Option(
        "--json", help="Write the fuseforge.check/1 record here ('-': to stdout, the summary to stderr).")] = None,
    device: Annotated[str | None, typer.Option(help="cuda or cpu (default: cuda if available).")] = None,
    seeds: Annotated[int, typer.Option(min=1, help="Seeds 0..N-1, each with two input distributions.")] = 3,
    trials: Annotated[int, typer.Option(min=0, help="Timed calls, each on fresh inputs (fewer where they would "
                                                   "pass 4 GiB of inputs; 0: no timing).")] = 50,
    warmup: Annotated[int, typer.Option(min=0, help="Untimed calls before timing.")] = 5,
    tolerance_factor: Annotated[float, typer.Option(
        help="Candidate's error vs fp64 may be this many times eager fp32's (plus a tiny floor).")] = FACTOR,
    extra_batch: Annotated[int | None, typer.Option(
        help="Also verify at this batch size, besides twice the file's and 1 (default: b // 2 + 1; 0: at the "
             "file's batch only).")] = None,
    build_timeout: Annotated[float, typer.Option(help="Seconds for import + build + construction.")] = 900.0,
    run_timeout: Annotated[float, typer.Option(help="Seconds for everything after the build.")] = 600.0,
    no_compile: Annotated[bool, typer.Option("--no-compile", help="Do not time torch.compile.")] = False,
    max_autotune: Annotated[bool, typer.Option(
        "--max-autotune", help="Also time torch.compile(mode=\"max-autotune\") as a baseline (CUDA only; off by "
        "default: its autotuning adds minutes per model).")] = False,
    workdir: Annotated[Path | None, typer.Option(help="Keep the workers' files here (default: a temp dir).")] = None,
) -> None:
    """Grade a candidate ModelNew: builds? correct vs fp64? how fast? cheats?

    Verdicts: correct, incorrect, interface_mismatch, build_failed, invalid_python, cheat:<kind>.

    Exit code 0 iff correct, 1 for any other verdict, 2 if the grader could not grade (error: e.g. the
    model file fails).
    """
    import torch

    from fuseforge.check.orchestrate import CheckSettings, check_files
    from fuseforge.check.report import summary, to_json, write_json

    settings = CheckSettings(device=device or ("cuda" if torch.cuda.is_available() else "cpu"), seeds=seeds,
                             trials=trials, warmup=warmup, tolerance_factor=tolerance_factor,
                             extra_batch=extra_batch, build_timeout_s=build_timeout, run_timeout_s=run_timeout,
                             compile=not no_compile, max_autotune=max_autotune, workdir=workdir)
    to_stdout = json_path is not None and str(json_path) == "-"
    console = Console(stderr=to_stdout, highlight=False, soft_wrap=True)
    with console.status(f"checking {candidate.name}"):  # each stage on a line of its own as it starts
        record = check_files(model, candidate, settings, gate=_gpu_lease(settings.device),
                             progress=lambda line: console.print(f"  {line}", markup=False))
    for line in summary(record):
        console.print(line)
    if to_stdout:
        sys.stdout.write(to_json(record))
    elif json_path is not None:
        write_json(json_path, record)
        console.print(f"  record: {json_path}")
    code = {"correct": EXIT_CORRECT, "error": EXIT_GRADER_ERROR}.get(record["verdict"], EXIT_NOT_CORRECT)
    raise typer.Exit(code)


def _gpu_lease(device: str):
    """The GPU lease of the environment (`fuseforge suite` names one per GPU) as the gate of the workers' run
    phases, so that a check shares its GPU with other jobs as the evaluator does; None elsewhere."""
    from fuseforge.evaluate import lease

    return lease.from_env("check") if device == "cuda" else None


def register(app: typer.Typer) -> None:
    """Add the `check` command to `app` (fuseforge/cli.py)."""
    app.command("check")(check)


def standalone() -> typer.Typer:
    """A one-command app: `python -m fuseforge.check MODEL CANDIDATE`."""
    app = typer.Typer(add_completion=False, no_args_is_help=True)
    register(app)
    return app
