"""`fuseforge fuzz`: `register(app)` adds it to a typer app (fuseforge/cli.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def fuzz(
    count: Annotated[int, typer.Option(help="Models to generate and optimize.")] = 20,
    seed: Annotated[int, typer.Option(help="Seed of the first model; model i has seed SEED + i "
                                           "(the same seed always writes the same file).")] = 0,
    out: Annotated[Path, typer.Option(help="Campaign folder: models/, runs/, logs/, fuzz.json.")] = Path("out/fuzz"),
    no_gpu: Annotated[bool, typer.Option(
        "--no-gpu", help="Run `optimize --no-gpu` (the CPU-side stages only) on each model.")] = False,
    no_compile: Annotated[bool, typer.Option(
        "--no-compile", help="Pass --no-compile to optimize (no torch.compile baseline in the benchmark).")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds allowed to one model's optimize run.")] = 600,
    jobs: Annotated[int, typer.Option(min=1, help="Models run at once (on a GPU their GPU work takes turns "
                                                  "through a lease: OUT/gpu.lock).")] = 1,
    gpus: Annotated[int | None, typer.Option(
        min=1, help="GPUs the models are spread over (default: every GPU visible).")] = None,
    check: Annotated[bool, typer.Option(
        "--check", help="Grade each verified ModelNew again with `fuseforge check` (GPU runs only).")] = False,
    every_kernel: Annotated[bool, typer.Option(
        "--every-kernel", help="Pass --every-kernel to optimize: every anchor a kernel can take is that kernel, "
                               "whatever the cost model expects (the kernels run on the fuzzer's odd shapes).")] = False,
    generate_only: Annotated[bool, typer.Option(
        "--generate-only", help="Write the model files into OUT/models/ and stop.")] = False,
) -> None:
    """Generate random, shape-valid KernelBench-style models and run `optimize` on each, recording every outcome.

    Each model: an anchor op (linear, matmul, bmm, conv1d/2d/3d, conv_transpose2d/3d) with random sizes,
    strides, padding, groups and dilation, then 2-6 ops drawn among those valid for the shape reached:
    pointwise ops, broadcast operands, reductions, softmax-like ops, norms, pools, tensor constants, dropout,
    in-place ops, views, residuals, tuple outputs. One optimize process per model, JOBS at a time (on GPUs, each
    pinned to one of them in turn, the models on one GPU taking turns for it), each with a timeout; OUT/fuzz.json is rewritten after each model (the same command on the same OUT goes on where it
    stopped); the end prints counts by outcome and the distinct failure reasons with their counts.

    Exit code 0: every model passed (and, with --check, every check said correct); 1: some did not (see
    OUT/fuzz.json).
    """
    from .campaign import CampaignConfig, run_campaign, summary_lines, write_model

    if generate_only:
        for s in range(seed, seed + count):
            model, path = write_model(out, s)
            print(f"{path}: {' > '.join(model.ops)}")
        return
    from fuseforge.suite.environment import visible_gpu_ids

    gpu_ids = [] if no_gpu else visible_gpu_ids()[:gpus]
    config = CampaignConfig(out=out, count=count, seed=seed, gpu=not no_gpu, compile_baseline=not no_compile,
                            timeout_s=timeout, jobs=jobs, gpu_ids=gpu_ids, check=check, every_kernel=every_kernel)
    campaign = run_campaign(config, progress=lambda line: print(line, flush=True))
    for line in summary_lines(campaign.summary()):
        print(line)
    print(f"record: {campaign.record_path}")
    raise typer.Exit(0 if all(o.outcome == "passed" and o.check_verdict in (None, "correct")
                              for o in campaign.outcomes) else 1)


def register(app: typer.Typer) -> None:
    """Add the `fuzz` command to `app`."""
    app.command("fuzz")(fuzz)
