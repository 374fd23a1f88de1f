"""What the suite runs: one job per model file (`optimize`), or per model x candidate file (`check`).

A job is identified by its key: a hash of the model file's contents, of the candidate file's contents
("" for optimize) and of the settings (job kind, GPU or CPU-only, the build and run command templates).
The same key in the database means the same work, whatever the file is called or wherever it lies.

Model files: every `*.py` under DIR (recursively; names starting with "_" or "." left out) whose text
defines `class Model` and `get_init_inputs`. Candidate files: every `*.py` under the candidates folder
that defines `ModelNew`; candidate `NAME.py` or `NAME.ANYTHING.py` belongs to model `NAME.py`.

Each job has up to two phases, each a subprocess of a command template: "build" (CPU only: the CPU
stages and the CUDA extension prebuild, only when GPUs are used) and "run" (on one GPU, or the CPU-only
stages with --no-gpu semantics). A template is split like a shell line and each word is formatted with:

    {python}      this interpreter          {model}, {candidate}  the files ({candidate}: "" for optimize)
    {out}         the job's output folder   {no_gpu}      "--no-gpu" when the suite runs without GPUs
    {no_compile}  "--no-compile" when a torch.compile baseline of this model is already cached for this
                  GPU and torch version (the baselines table), so it is not timed again (check jobs; the
                  default optimize command leaves the baselines to the evaluator's own cache, which the
                  suite fills from the same table: FUSEFORGE_BASELINES, fuseforge/evaluate/baselines.py)
    {max_autotune}  "--max-autotune" with `suite --max-autotune` when no torch.compile max-autotune baseline
                  of this model is cached yet for this GPU and torch version (`--max-autotune` appends it to
                  the default run commands)
A word that formats to "" is dropped.

Files of a job: OUT (`out_dir`, the `{out}` of the commands) holds what the job's command writes, and
nothing else: `optimize` moves every artefact of a plan it leaves into OUT/attempts/. What the suite keeps
about the job lies beside it, in OUT.suite/ (`suite_dir`): the phases' logs (suite_build.log,
suite_run.log), the CUDA extensions they build (torch_extensions/), the baseline cache handed to the
evaluator (baselines.json) and the GPU lease log (gpu_lease.jsonl).
"""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

OPTIMIZE_BUILD = "{python} -m fuseforge.suite.build {model} {out}"
OPTIMIZE_RUN = "{python} -m fuseforge optimize {model} -o {out} {no_gpu}"
CHECK_BUILD = "{python} -m fuseforge.suite.build {model} {out} --candidate {candidate}"
# `fuseforge check` writes its record (schema fuseforge.check/1) to OUT/check.json; execute.collect reads it.
CHECK_RUN = ("{python} -m fuseforge check {model} {candidate} --json {out}/check.json --workdir {out}/check_work "
             "--device {device} {no_compile}")
DEFAULT_COMMANDS = {"optimize": (OPTIMIZE_BUILD, OPTIMIZE_RUN), "check": (CHECK_BUILD, CHECK_RUN)}


@dataclass(frozen=True)
class SuiteConfig:
    """One `fuseforge suite` invocation; every default lives here."""

    models: Path
    db: Path = Path("results.sqlite")
    candidates: Path | None = None  # given: `check` jobs (model x candidate), else `optimize` jobs
    out: Path | None = None  # None: next to the database, "<db stem>_out"
    gpus: int | None = None  # None: every GPU nvidia-smi lists (honouring CUDA_VISIBLE_DEVICES); 0: no GPU
    jobs: int | None = None  # CPU workers: the prebuild pool, or the job workers without GPUs; None: all cores
    build_timeout_s: float = 1800.0
    run_timeout_s: float = 1800.0
    max_attempts: int = 3  # a job that crashed or timed out is retried by later runs up to this many times
    build_command: str | None = None  # None: the kind's default (DEFAULT_COMMANDS)
    run_command: str | None = None
    ray: str | None = None  # a Ray address ("auto", "ray://host:10001", "local"): run the jobs there
    max_autotune: bool = False  # also time torch.compile max-autotune once per model x GPU x torch version
    run_slots: int | None = None  # run phases in flight per GPU; None: 2 for the default commands (optimize's
    # evaluator and check's workers take the GPU lease, so the next job's CPU work overlaps this one's GPU work), else 1
    kernel_flags: tuple[str, ...] = ()  # optimize's kernel families turned off, e.g. ("--no-rows",): both phases

    @property
    def kind(self) -> str:
        return "check" if self.candidates else "optimize"

    @property
    def slots_per_gpu(self) -> int:
        """Run phases in flight on one GPU at a time (see run_slots)."""
        if self.run_slots is not None:
            return max(1, self.run_slots)
        leased = self.run_command is None and not self.ray
        return 2 if leased else 1

    @property
    def out_root(self) -> Path:
        return self.out or self.db.with_name(self.db.stem + "_out")

    def commands(self) -> tuple[str, str]:
        build, run = DEFAULT_COMMANDS[self.kind]
        if self.kind == "optimize" and self.kernel_flags:  # the build phase must build what the run phase runs
            build, run = (f"{t} {' '.join(self.kernel_flags)}" for t in (build, run))
        if self.max_autotune:
            run += " {max_autotune}"
        return self.build_command or build, self.run_command or run


@dataclass(frozen=True)
class Job:
    kind: str
    model: Path
    model_hash: str
    candidate: Path | None
    candidate_hash: str  # "" for optimize
    settings: str  # canonical JSON: {"kind", "gpu", "build", "run"}
    out_dir: Path

    @property
    def key(self) -> str:
        return _digest(f"{self.model_hash}|{self.candidate_hash}|{self.settings}".encode())[:24]

    @property
    def suite_dir(self) -> Path:
        """OUT.suite/: the suite's own files about the job (module docstring), beside OUT, never inside it."""
        return self.out_dir.with_name(self.out_dir.name + ".suite")

    @property
    def name(self) -> str:
        return self.model.stem if self.candidate is None else f"{self.model.stem} / {self.candidate.name}"

    @property
    def build_template(self) -> str | None:
        return json.loads(self.settings)["build"]

    @property
    def run_template(self) -> str:
        return json.loads(self.settings)["run"]

    def argv(self, template: str, no_gpu: bool = False, no_compile: bool = False,
             max_autotune: bool = False) -> list[str]:
        values = {"python": sys.executable, "model": str(self.model), "out": str(self.out_dir),
                  "candidate": str(self.candidate or ""), "no_gpu": "--no-gpu" if no_gpu else "",
                  "device": "cpu" if no_gpu else "cuda",
                  "no_compile": "--no-compile" if no_compile else "",
                  "max_autotune": "--max-autotune" if max_autotune else ""}
        words = [word.format(**values) for word in shlex.split(template)]
        return [w for w in words if w]


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_hash(path: Path) -> str:
    return _digest(path.read_bytes())[:16]


def _python_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*.py")
                  if not any(part.startswith((".", "_")) for part in p.relative_to(root).parts))


def model_files(root: Path) -> list[Path]:
    return [p for p in _python_files(root)
            if "class Model" in (text := p.read_text(errors="replace")) and "get_init_inputs" in text]


def candidate_files(root: Path) -> list[Path]:
    return [p for p in _python_files(root) if "ModelNew" in p.read_text(errors="replace")]


def candidates_of(model: Path, candidates: list[Path]) -> list[Path]:
    return [c for c in candidates if c.stem == model.stem or c.stem.startswith(model.stem + ".")]


def settings_json(kind: str, gpu: bool, build: str, run: str) -> str:
    """The settings that make two runs of one model the same work (the build phase runs only with GPUs)."""
    return json.dumps({"kind": kind, "gpu": gpu, "build": build if gpu else None, "run": run}, sort_keys=True)


def plan(config: SuiteConfig, gpus: int) -> list[Job]:
    """Every job of this invocation, in a stable order, without duplicates (identical files run once)."""
    build, run = config.commands()
    settings = settings_json(config.kind, gpus > 0, build, run)
    root = config.out_root.resolve() / f"{config.kind}-{'gpu' if gpus else 'cpu'}-{_digest(settings.encode())[:6]}"
    candidates = candidate_files(config.candidates) if config.candidates else []
    jobs: dict[str, Job] = {}
    for model in model_files(config.models):
        model = model.resolve()
        mh = file_hash(model)
        folder = root / f"{model.stem}-{mh[:8]}"
        pairs = [(None, "", folder)] if config.kind == "optimize" else [
            (c.resolve(), (ch := file_hash(c)), folder / f"{c.stem}-{ch[:8]}") for c in candidates_of(model, candidates)]
        for cand, ch, out in pairs:
            job = Job(config.kind, model, mh, cand, ch, settings, out)
            jobs.setdefault(job.key, job)
    return list(jobs.values())
