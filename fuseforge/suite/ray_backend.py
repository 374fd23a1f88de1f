"""The suite's jobs on a Ray cluster: `fuseforge suite DIR --ray ADDRESS` (`pip install 'fuseforge[ray]'`).

The same two phases as on one host, as Ray tasks:
    build  num_cpus=1 (so every core of every node builds), no GPU; returns its outcome and its node
    run    num_gpus=1, num_cpus=0, on the node that built the job (node affinity: the build lives in that
           node's output folder and TORCH_EXTENSIONS_DIR); Ray sets CUDA_VISIBLE_DEVICES for the task and
           the phase pins its subprocess to that GPU. Without GPUs (--gpus 0): num_cpus=1, no build phase.
The driver (this process) owns the database and writes each outcome when its task returns. Output folders
are the same paths on every node: on a shared filesystem the artefacts are all in one place; otherwise
they stay on the node that ran the job (the database has the results either way). fuseforge must be
installed on every node.

ADDRESS: "auto" (the cluster this machine belongs to), "ray://HOST:10001" (Ray client), or "local" (start
a Ray instance on this machine). If Ray is already initialised in this process, it is used as it is.
--gpus defaults to the cluster's GPU count (0: CPU-only jobs); Ray, not --gpus, decides how many run at once.
"""

from __future__ import annotations

import os
import socket

from .context import Context, Planned, guarded
from .environment import gpu_info, torch_version
from .execute import Outcome, build_phase, kill_live, run_phase
from .jobs import Job


def build_task(job: Job, timeout_s: float) -> tuple[Outcome, str]:
    import ray

    outcome = guarded(build_phase, job, timeout_s, os.cpu_count() or 1)
    return outcome, ray.get_runtime_context().get_node_id()


def run_task(job: Job, timeout_s: float, cached: set[tuple[str, str]], built: Outcome | None, gpu: bool,
             autotuned: set[tuple[str, str]] | None = None, baselines: list[dict] | None = None) -> Outcome:
    """`cached`/`autotuned`: (GPU, torch) pairs with a cached compile / max-autotune baseline (None: no
    max-autotune baseline wanted); `baselines`: the model's baseline cache entries from the database."""
    gpu_id = None
    if gpu:  # Ray set CUDA_VISIBLE_DEVICES to the GPU it gave this task
        gpu_id = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0] or None
    here = (gpu_info(gpu_id).get("name"), torch_version()) if gpu_id is not None else None
    no_compile = here is not None and here in cached
    autotune = autotuned is not None and here not in autotuned
    outcome = guarded(run_phase, job, gpu_id, timeout_s, no_compile, built, autotune, None, baselines)
    outcome.worker = f"ray:{socket.gethostname()}:" + ("cpu" if gpu_id is None else f"gpu{gpu_id}")
    return outcome


def connect(address: str) -> bool:
    """Join (or start, for "local") the Ray cluster; True if this call started Ray in this process."""
    import ray

    if ray.is_initialized():
        return False
    ray.init(address=None if address == "local" else address, log_to_driver=False)
    return True


def cluster_gpus() -> int:
    import ray

    return int(ray.cluster_resources().get("GPU", 0))


def run_on_ray(todo: list[Planned], ctx: Context, gpus: int) -> None:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    build = ray.remote(num_cpus=1, max_retries=0)(build_task)
    run = ray.remote(num_gpus=1 if gpus else 0, num_cpus=0 if gpus else 1, max_retries=0)(run_task)
    cfg = ctx.config
    pending: dict = {}

    def submit_run(p: Planned, built: Outcome | None, node: str | None) -> None:
        options = {"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)} if node else {}
        ref = run.options(**options).remote(p.job, cfg.run_timeout_s, ctx.store.cached(p.job.model_hash), built, gpus > 0,
                                            ctx.store.cached(p.job.model_hash, "compile_max_autotune")
                                            if cfg.max_autotune else None, ctx.store.baseline_entries(p.job.model_hash))
        pending[ref] = (p, "run")
        ctx.start(p, "ray", "run")

    try:
        for p in todo:
            if gpus:
                ctx.start(p, "ray", "build")
                pending[build.remote(p.job, cfg.build_timeout_s)] = (p, "build")
            else:
                submit_run(p, None, None)
        while pending:
            [ref], _ = ray.wait(list(pending), num_returns=1)
            p, phase = pending.pop(ref)
            try:
                value = ray.get(ref)
            except Exception as exc:  # the task's worker died (node lost, killed): no verdict, retried next run
                ctx.finish(p, Outcome("failed", "error", phase=phase, worker="ray",
                                      reason=f"Ray task failed: {type(exc).__name__}: {str(exc).splitlines()[0]}"))
                continue
            if phase == "build":
                outcome, node = value
                if outcome.status == "built":
                    submit_run(p, outcome, node)
                    continue
                outcome.worker = "ray"
                value = outcome
            ctx.finish(p, value)
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref, force=True)
        kill_live()
        ctx.store.interrupt_running(ctx.run_id)
        raise
