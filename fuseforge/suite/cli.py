"""`fuseforge suite` and `fuseforge report`: plain functions, and `register(app)` to add them to a typer app.

    suite(config)          exit code 0: every job of this run reached a verdict (correct or not);
                           1: a job crashed, timed out or was interrupted (run the same command to retry it);
                           130: stopped (Ctrl-C, SIGTERM): the jobs in flight were killed, the rest is kept
    report(db, html=None)  terminal tables; with html, also the page and its two PNGs next to it
                           (OUT, OUT-stem_speedup.png, OUT-stem_roofline.png); exit code 2 if DB is unusable
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from ..family_switches import family_switches, flags
from .jobs import SuiteConfig


def suite(config: SuiteConfig, console: Console | None = None) -> int:
    from .scheduler import run_suite

    console = console or Console(stderr=True, width=None if sys.stderr.isatty() else 160)
    try:
        result = run_suite(config, console)
    except KeyboardInterrupt:
        console.print("[yellow]stopped: the jobs in flight were killed; the same command resumes the suite[/]")
        return 130
    console.print(f"run {result.run_id} done: {len(result.outcomes)} job(s) ran, {result.skipped} skipped; "
                  f"results in {config.db} (`fuseforge report {config.db}`)")
    return result.exit_code


def report(db: Path, html: Path | None = None, console: Console | None = None) -> int:
    from .db import SchemaError, Store
    from .report import latest, print_report

    console = console or Console(width=None if sys.stdout.isatty() else 200)
    if not db.is_file():
        console.print(f"[red]{db}: no such file[/]")
        return 2
    try:
        store = Store(db, readonly=True)
    except SchemaError as exc:
        console.print(f"[red]{exc}[/]")
        return 2
    try:
        rows, runs = store.rows("jobs"), store.rows("runs")
    finally:
        store.close()
    print_report(rows, console)
    if html is not None:
        from .charts import html_page, roofline_png, speedup_png

        current = latest(rows)
        speedup, roofline = speedup_png(current), roofline_png(current)
        html.parent.mkdir(parents=True, exist_ok=True)
        html.with_name(f"{html.stem}_speedup.png").write_bytes(speedup)
        html.with_name(f"{html.stem}_roofline.png").write_bytes(roofline)
        html.write_text(html_page(current, runs, speedup, roofline, f"fuseforge suite report: {db.name}"))
        console.print(f"wrote {html} (and its two PNG charts next to it)")
    return 0


def register(app: typer.Typer) -> None:
    """Add the `suite` and `report` commands to the fuseforge app."""

    @app.command("suite")
    @family_switches
    def suite_command(
        models: Annotated[Path, typer.Argument(help="A folder of model files (searched recursively), or one file.")],
        candidates: Annotated[Path | None, typer.Option(
            help="A folder of candidate ModelNew files: grade each (`check` jobs) instead of optimizing. "
                 "Candidate NAME.py or NAME.*.py belongs to model NAME.py.")] = None,
        gpus: Annotated[int | None, typer.Option(
            help="GPU workers, one per GPU (pinned with CUDA_VISIBLE_DEVICES); 0: CPU stages only "
                 "(--no-gpu semantics). Default: every visible GPU.")] = None,
        jobs: Annotated[int | None, typer.Option(
            help="CPU workers: parallel prebuilds (default: cores minus one per GPU), or parallel jobs "
                 "without GPUs (default: cores).")] = None,
        db: Annotated[Path, typer.Option(help="The SQLite results file (created, or resumed).")] = Path("results.sqlite"),
        out: Annotated[Path | None, typer.Option(
            help="Folder for each job's artefacts and logs (default: DB's name + _out).")] = None,
        build_timeout: Annotated[float, typer.Option(help="Seconds allowed to a job's build phase.")] = 1800,
        run_timeout: Annotated[float, typer.Option(help="Seconds allowed to a job's run phase.")] = 1800,
        max_attempts: Annotated[int, typer.Option(
            help="Runs that may retry a job that crashed or timed out.")] = 3,
        build_command: Annotated[str | None, typer.Option(
            help="Template of the build phase (see fuseforge/suite/jobs.py); default: the kind's own.")] = None,
        run_command: Annotated[str | None, typer.Option(
            help="Template of the run phase, e.g. '{python} -m fuseforge optimize {model} -o {out} {no_gpu} "
                 "{no_compile}' (the default for optimize).")] = None,
        max_autotune: Annotated[bool, typer.Option(
            "--max-autotune", help="Also time torch.compile(mode='max-autotune') as a baseline, once per model, "
                                   "GPU and torch version (cached; adds minutes of autotuning per model).")] = False,
        run_slots: Annotated[int | None, typer.Option(
            help="Run phases in flight per GPU; one at a time holds the GPU (its lease) while the next does its "
                 "CPU stages. Default: 2 with the default run commands (optimize and check take the lease), else 1.")] = None,
        ray: Annotated[str | None, typer.Option(
            help="Run the jobs on a Ray cluster: 'auto', 'ray://HOST:10001' or 'local' "
                 "(needs the optional extra: pip install 'fuseforge\\[ray]').")] = None,
        every_kernel: Annotated[bool, typer.Option(
            "--every-kernel", help="optimize jobs: every anchor a kernel can take is that kernel, whatever the cost "
                                   "model expects (testing the kernels; as `fuseforge optimize --every-kernel`).")] = False,
        *,
        families: frozenset[str],  # optimize jobs: the families left on, as `fuseforge optimize`'s switches
    ) -> None:
        """Run `optimize` (or `check` against --candidates) on every model file of MODELS, each in its own process.

        Extensions are pre-built on the CPU cores while one worker per GPU times; results go to the SQLite
        file DB as each job ends. Running the same command again skips what is done and retries what
        crashed, timed out or was interrupted. Read the results with `fuseforge report DB`.

        Exit code 0: every job of this run reached a verdict (correct or not); 1: some job crashed, timed out
        or was interrupted; 130: stopped.
        """
        config = SuiteConfig(models=models, db=db, candidates=candidates, out=out, gpus=gpus, jobs=jobs,
                             build_timeout_s=build_timeout, run_timeout_s=run_timeout, max_attempts=max_attempts,
                             build_command=build_command, run_command=run_command, ray=ray,
                             max_autotune=max_autotune, run_slots=run_slots,
                             kernel_flags=(*flags(families), *(["--every-kernel"] if every_kernel else [])))
        raise typer.Exit(suite(config))

    @app.command("report")
    def report_command(
        db: Annotated[Path, typer.Argument(help="The SQLite file written by `fuseforge suite`.")],
        html: Annotated[Path | None, typer.Option(
            help="Also write this HTML page, with a speedup chart and a roofline chart (PNGs next to it).")] = None,
    ) -> None:
        """Print per-job results and totals (correct rate, fast_p, geomean speedups) of a suite database."""
        raise typer.Exit(report(db, html))
