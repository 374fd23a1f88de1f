"""Run a suite: plan the jobs, skip what is done, run the rest, store each outcome as soon as it is known.

Local scheduling (one host):
    builds   a pool of `jobs` threads runs every job's build phase on the CPU (only when GPUs are used);
             each built job is queued for the GPU workers in the order the builds finish
    workers  `slots_per_gpu` threads per GPU id run the queued jobs' run phase, pinned with
             CUDA_VISIBLE_DEVICES=<id>; without GPUs, `jobs` threads run the run phase with --no-gpu
             semantics and there is no build
    the GPU  every run phase on a GPU gets that GPU's lease (fuseforge/evaluate/lease.py), which the
             evaluator holds for its verification and benchmark. With two slots per GPU (the default for
             optimize jobs with the default command) the next job's CPU stages -- capture, plans, the
             float64 CPU check, building a fallback plan's extension -- run while the current job has the
             GPU, and the GPU goes from one evaluation to the next; one job at a time is ever on the GPU.
    the CPUs when there are at least four CPUs per GPU, one CPU per GPU is kept for the timed calls
             (FUSEFORGE_TIMING_CPUS) and every phase process runs on the others (environment.cpu_plan)
Threads only wait on subprocesses, so the suite process stays light. By default the build pool leaves one
core per GPU worker free, so compiling does not starve the process being timed of its CPU.
With `--ray ADDRESS` the same jobs go to a Ray cluster instead (ray_backend.py: one run phase per GPU,
no lease).
"""

from __future__ import annotations

import os
import queue
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from rich.console import Console

from .context import Context, Planned, guarded
from .db import Store
from .environment import cpu_plan, gpu_info, host_environment, lease_file, torch_version, visible_gpu_ids
from .execute import GpuShare, build_phase, kill_live, run_phase
from .jobs import SuiteConfig, plan
from .progress import Tracker


@dataclass
class SuiteResult:
    run_id: int
    planned: int
    skipped: int
    outcomes: dict[str, str] = field(default_factory=dict)  # job name -> verdict in this run
    failed: int = 0  # jobs of this run without a verdict (crashed, killed by a signal, timed out)

    @property
    def exit_code(self) -> int:
        """0 when every job of this run reached a verdict (correct or not); 1 when one failed to."""
        return 1 if self.failed else 0


def gpu_ids_for(config: SuiteConfig, console: Console) -> list[str]:
    """The GPU ids to pin workers to; under Ray only their number counts (default: the cluster's GPUs)."""
    if config.ray:
        from .ray_backend import cluster_gpus

        return [str(i) for i in range(cluster_gpus() if config.gpus is None else config.gpus)]
    ids = visible_gpu_ids()
    wanted = len(ids) if config.gpus is None else config.gpus
    if wanted > len(ids):
        console.print(f"[yellow]--gpus {wanted}, but {len(ids)} GPU(s) visible: using ids 0..{wanted - 1}[/]")
        ids = [str(i) for i in range(wanted)]
    return ids[:wanted]


def run_suite(config: SuiteConfig, console: Console | None = None) -> SuiteResult:
    console = console or Console(stderr=True)
    if config.ray:
        from .ray_backend import connect

        ray_started = connect(config.ray)
    try:
        return _run_suite(config, console)
    finally:
        if config.ray and ray_started:
            import ray

            ray.shutdown()


def _run_suite(config: SuiteConfig, console: Console) -> SuiteResult:
    gpu_ids = gpu_ids_for(config, console)
    jobs = plan(config, len(gpu_ids))
    store = Store(config.db)
    try:
        recovered = store.recover_interrupted()
        env = {**host_environment(), "gpus": [{"id": g, **({} if config.ray else gpu_info(g))} for g in gpu_ids],
               "ray": config.ray}
        run_id = store.start_run({k: str(v) if v is not None else None for k, v in asdict(config).items()}, env)
        todo, skipped = [], 0
        for job in jobs:
            done, failures, attempts = store.history(job.key)
            if done or failures >= config.max_attempts:
                skipped += 1
            else:
                todo.append(Planned(job, attempts + 1))
        result = SuiteResult(run_id, len(jobs), skipped)
        console.print(f"suite run {run_id}: {len(jobs)} {config.kind} jobs, {skipped} already done (or out of "
                      f"attempts), {len(todo)} to run on {len(gpu_ids)} GPU(s)"
                      + (f"; {recovered} interrupted job(s) of killed runs will be retried" if recovered else ""))
        tracker = Tracker(len(todo), console)
        ctx = Context(config, store, run_id, tracker)
        with tracker:
            if config.ray:
                from .ray_backend import run_on_ray

                run_on_ray(todo, ctx, gpus=len(gpu_ids))
            else:
                run_local(todo, ctx, gpu_ids)
        result.outcomes.update(tracker.verdicts)
        result.failed = tracker.failed
        store.finish_run(run_id)
    finally:
        store.close()
    return result


def run_local(todo: list[Planned], ctx: Context, gpu_ids: list[str]) -> None:
    """Build pool + `slots_per_gpu` workers per GPU (or `jobs` CPU workers without GPUs); see the module
    docstring."""
    ready: queue.Queue = queue.Queue()
    cores = os.cpu_count() or 1
    n_jobs = ctx.config.jobs or (max(1, cores - len(gpu_ids)) if gpu_ids else cores)
    if gpu_ids:
        ctx.timing_cpus, ctx.background = cpu_plan(len(gpu_ids))
    slots: list[tuple[int, str | None]] = ([(i, g) for i, g in enumerate(gpu_ids)
                                            for _ in range(ctx.config.slots_per_gpu)] if gpu_ids
                                           else [(i, None) for i in range(n_jobs)])
    ctx.threads = max(1, len(ctx.background or range(cores)) // len(slots)) if gpu_ids else None
    builds = ThreadPoolExecutor(n_jobs, thread_name_prefix="build")
    for p in todo:
        if gpu_ids:
            builds.submit(_build, p, ctx, ready, n_jobs)
        else:
            ready.put((p, None))
    workers = [threading.Thread(target=_worker, args=(gpu, index, ctx, ready), daemon=True) for index, gpu in slots]
    previous = _stop_on_sigterm()
    try:
        for w in workers:
            w.start()
        builds.shutdown(wait=True)
        for _ in workers:
            ready.put(None)
        for w in workers:
            w.join()
    except KeyboardInterrupt:
        ctx.stop.set()
        builds.shutdown(wait=False, cancel_futures=True)
        kill_live()
        for _ in workers:
            ready.put(None)
        ctx.store.interrupt_running(ctx.run_id)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _stop_on_sigterm():
    """SIGTERM stops the suite like Ctrl-C (its jobs' process groups are killed); returns the old handler."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, handler)


def _build(p: Planned, ctx: Context, ready: queue.Queue, parallel: int) -> None:
    if ctx.stop.is_set():
        return
    ctx.start(p, "cpu", "build")
    outcome = guarded(build_phase, p.job, ctx.config.build_timeout_s, parallel, ctx.background)
    if ctx.stop.is_set():
        return
    if outcome.status == "built":
        ready.put((p, outcome))
    else:
        ctx.finish(p, outcome)


def _worker(gpu_id: str | None, index: int, ctx: Context, ready: queue.Queue) -> None:
    gpu_name = gpu_info(gpu_id).get("name")
    timing = ctx.timing_cpus.get(index)
    share = GpuShare(lease_file(gpu_id), {timing} if timing is not None else None,
                     ctx.background, ctx.threads) if gpu_id is not None else None
    while (item := ready.get()) is not None and not ctx.stop.is_set():
        p, built = item
        ctx.start(p, "cpu" if gpu_id is None else f"gpu{gpu_id}", "run")
        here = (gpu_name, torch_version())
        cached = gpu_id is not None and here in ctx.store.cached(p.job.model_hash)
        autotune = ctx.config.max_autotune and here not in ctx.store.cached(p.job.model_hash, "compile_max_autotune")
        outcome = guarded(run_phase, p.job, gpu_id, ctx.config.run_timeout_s, cached, built, autotune, share,
                          ctx.store.baseline_entries(p.job.model_hash))
        outcome.worker = "cpu" if gpu_id is None else f"gpu{gpu_id}"
        if not ctx.stop.is_set():
            ctx.finish(p, outcome)
