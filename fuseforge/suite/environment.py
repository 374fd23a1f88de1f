"""Where a job ran: host, Python, torch, fuseforge commit, and the GPU (name, driver) it was pinned to;
and how the host is shared: the GPU lease files and the CPUs kept for timing.

GPUs are read with `nvidia-smi`, so the suite process itself never initialises CUDA (it would take memory
on every GPU being timed). The ids the suite pins are the entries of CUDA_VISIBLE_DEVICES when that is
set, else the indices nvidia-smi lists. Everything here is best effort: a missing tool gives None.

GPU leases (fuseforge/evaluate/lease.py) are lock files in `lease_dir()`, one per GPU id, shared by every
suite of this user on this host (FUSEFORGE_LEASE_DIR overrides the folder). `cpu_plan(n_gpus)` keeps one
CPU per GPU for the timed calls (the highest ids this process may use) and gives the rest to everything
else, when there are at least four CPUs per GPU; otherwise nothing is kept apart.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]


def _output(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def visible_gpu_ids() -> list[str]:
    """The GPU ids one worker each may be pinned to (CUDA_VISIBLE_DEVICES values)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [v.strip() for v in visible.split(",") if v.strip() and not v.strip().startswith("-")]
    listed = _output(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"])
    return listed.split() if listed else []


def gpu_info(gpu_id: str | None) -> dict:
    """{'name', 'driver'} of one GPU (by index or UUID), or {} without nvidia-smi or without a GPU."""
    if gpu_id is None:
        return {}
    line = _output(["nvidia-smi", "-i", str(gpu_id), "--query-gpu=name,driver_version", "--format=csv,noheader"])
    if not line:
        return {}
    name, _, driver = line.splitlines()[0].rpartition(",")
    return {"name": name.strip(), "driver": driver.strip()}


@functools.cache
def torch_version() -> str | None:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def commit() -> str | None:
    """The fuseforge checkout's commit, with "+dirty" when its files differ from it.

    FUSEFORGE_COMMIT, when set, is taken instead: for copies of a checkout whose .git is missing or stale.
    """
    if os.environ.get("FUSEFORGE_COMMIT"):
        return os.environ["FUSEFORGE_COMMIT"]
    sha = _output(["git", "rev-parse", "--short=12", "HEAD"], cwd=PACKAGE_DIR)
    if sha is None:
        return None
    dirty = _output(["git", "status", "--porcelain", "--untracked-files=no", "--", "."], cwd=PACKAGE_DIR)
    return sha + ("+dirty" if dirty else "")


def host_environment() -> dict:
    return {"host": socket.gethostname(), "platform": platform.platform(), "python": sys.version.split()[0],
            "torch": torch_version(), "commit": commit()}


def job_environment(gpu_id: str | None) -> dict:
    """The environment of one job before it runs: the host's, and the GPU it is pinned to (if any)."""
    info = gpu_info(gpu_id)
    return {**host_environment(), "cuda_visible_devices": gpu_id if gpu_id is not None else "",
            "gpu": info.get("name"), "driver": info.get("driver")}


def lease_dir() -> Path:
    """The folder of the GPU lease files (module docstring)."""
    override = os.environ.get("FUSEFORGE_LEASE_DIR")
    return Path(override) if override else Path(tempfile.gettempdir()) / f"fuseforge_gpu_leases_{os.getuid()}"


def lease_file(gpu_id: str) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in str(gpu_id))
    return lease_dir() / f"gpu{safe}.lock"


def thread_siblings(cpu: int) -> set[int]:
    """The CPUs that share `cpu`'s core (its SMT threads, itself included) as sysfs lists them; {cpu} where unknown."""
    try:
        text = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text().strip()
    except OSError:
        return {cpu}
    siblings = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        if not (lo.isdigit() and (hi or lo).isdigit()):
            return {cpu}
        siblings.update(range(int(lo), int(hi or lo) + 1))
    return siblings | {cpu}


def cpu_plan(n_gpus: int) -> tuple[dict[int, int], set[int] | None]:
    """({GPU slot index: the CPU kept for its timed calls}, the CPUs for every other process), or ({}, None)
    when the CPUs are too few to keep any apart (or the system has no CPU affinity). A kept CPU's SMT siblings stay
    idle too where enough CPUs are left: a compile on the other thread of its core would slow the timed calls'
    host side (a host-bound forward is timed by its host time)."""
    if n_gpus <= 0 or not hasattr(os, "sched_getaffinity"):
        return {}, None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 4 * n_gpus:
        return {}, None
    kept = cpus[-n_gpus:]
    background = set(cpus[:-n_gpus])
    quiet = background - set().union(*(thread_siblings(c) for c in kept))
    return dict(enumerate(kept)), quiet if len(quiet) >= 3 * n_gpus else background
