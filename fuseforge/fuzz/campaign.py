"""A fuzz campaign: for each seed, write the model file, run `optimize` on it in its own process (a timeout,
its own process group: a hang or a crash ends that model's run, never the campaign), and record the outcome
in OUT/fuzz.json, rewritten after every model.

`jobs` models run at once; on GPUs each model is pinned to one (CUDA_VISIBLE_DEVICES, the GPUs taken in
turn) and the GPU work of the models on one GPU takes turns through its lease (the one `fuseforge suite`
takes too: suite/environment.py lease_file, evaluate/lease.py), so one model's build overlaps another's verification and benchmark. Each run
gets its share of the CPUs for its threads (OMP_NUM_THREADS) and its compiler jobs (MAX_JOBS). A campaign
started again on the same OUT keeps the outcomes already recorded for its seeds and runs only the others.
With `check`, every verified `ModelNew` is graded again by `fuseforge check` (beside the other runs: its
verdict does not depend on its timings, and holding the lease for a whole check stalled every other model's
verification), and the verdict is recorded: a `ModelNew` that check finds incorrect is a wrong result the
campaign emitted.

Outcomes: passed (exit code 0), failed (a stage failed: the CLI's one-line reason), crashed (any other
exit: a traceback, a signal), timeout. Layout of OUT: models/fuzz_SEED.py, runs/fuzz_SEED/ (optimize's
artefacts), logs/fuzz_SEED.log (its stdout and stderr), fuzz.json.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fuseforge.evaluate import lease
from fuseforge.suite.environment import commit, lease_file

from .generator import generate
from .reasons import detours, failure_reason, last_stage, plan_left_key, plans_left, reason_key, signal_reason

OUTCOMES = ("passed", "failed", "crashed", "timeout")


@dataclass
class CampaignConfig:
    out: Path
    count: int = 20
    seed: int = 0  # model i has seed seed + i
    gpu: bool = False
    compile_baseline: bool = True
    timeout_s: float = 600
    jobs: int = 1  # models run at once
    gpu_ids: Sequence[str] = ()  # the GPUs the runs are pinned to, in turn (empty: as the environment has it)
    check: bool = False  # grade each verified ModelNew again with `fuseforge check`
    every_kernel: bool = False  # optimize --every-kernel: the kernels run on the fuzzer's shapes, whatever they cost
    # the check of a verified ModelNew: arguments with {python}, {model}, {candidate}, {json} filled in
    check_command: Sequence[str] = ("{python}", "-m", "fuseforge", "check", "{model}", "{candidate}", "--json",
                                    "{json}", "--no-compile", "--trials", "10", "--warmup", "2")
    # the run of one model: arguments with {python}, {model}, {out} filled in (default: fuseforge optimize)
    command: Sequence[str] | None = None

    def seeds(self) -> range:
        return range(self.seed, self.seed + self.count)

    def env(self, index: int = 0) -> dict:
        """The environment of the index-th model's runs: the CLI's console one line per message, tracebacks
        plain (their last line the exception); with several jobs, a share of the CPUs each and, on GPUs, the
        GPU it is pinned to and that GPU's lease."""
        env = {**os.environ, "COLUMNS": "1000", "_TYPER_STANDARD_TRACEBACK": "1"}
        if self.jobs > 1:
            share = str(max(1, (os.cpu_count() or 1) // self.jobs))
            env.update(OMP_NUM_THREADS=share, MAX_JOBS=share)
        if self.gpu and self.jobs > 1:
            gpu = self.gpu_ids[index % len(self.gpu_ids)] if self.gpu_ids else None
            if gpu is not None:
                env["CUDA_VISIBLE_DEVICES"] = gpu
            env[lease.LEASE_ENV] = str(lease_file(gpu if gpu is not None else "visible"))  # the suite's too
            env[lease.LOG_ENV] = str(self.out / "gpu_lease.jsonl")
        return env

    def argv(self, model: Path, out: Path) -> list[str]:
        template = list(self.command) if self.command else [
            "{python}", "-m", "fuseforge", "optimize", "{model}", "-o", "{out}",
            *([] if self.gpu else ["--no-gpu"]), *([] if self.compile_baseline else ["--no-compile"]),
            *(["--every-kernel"] if self.every_kernel else [])]
        return _filled(template, {"{python}": sys.executable, "{model}": str(model), "{out}": str(out)})

    def check_argv(self, model: Path, candidate: Path, record: Path) -> list[str]:
        return _filled(self.check_command, {"{python}": sys.executable, "{model}": str(model),
                                            "{candidate}": str(candidate), "{json}": str(record)})


def _filled(template: Sequence[str], fill: dict[str, str]) -> list[str]:
    argv = []
    for arg in template:
        for key, value in fill.items():
            arg = arg.replace(key, value)
        argv.append(arg)
    return argv


@dataclass
class Outcome:
    model: str  # the model file
    seed: int
    ops: list[str]
    outcome: str  # one of OUTCOMES
    exit_code: int | None  # None: killed at the timeout
    reason: str  # one line; "" when passed
    detours: list[str]  # progress lines that are not a stage: fallbacks to simpler plans
    plan_kept: str | None  # from the report: the plan optimize kept ...
    plans_left: list[str]  # ... and each plan left before it: "PLAN failed at STAGE: reason"
    seconds: float
    log: str
    out_dir: str
    check_verdict: str | None = None  # `fuseforge check` on the verified ModelNew (config.check)
    check_reason: str = ""
    commit: str | None = None  # the fuseforge commit the model ran at (a resumed campaign may span several)


@dataclass
class Campaign:
    config: CampaignConfig
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def record_path(self) -> Path:
        return self.config.out / "fuzz.json"

    def summary(self) -> dict:
        """Counts by outcome; the distinct failure reasons, and the distinct reasons the first plan was left
        for a simpler one (whether a simpler one then passed or not), each with its count and models."""
        counts = Counter(o.outcome for o in self.outcomes)
        failed = [(o.reason, o) for o in self.outcomes if o.outcome != "passed"]
        first_left = [((o.plans_left or o.detours)[0], o) for o in self.outcomes if o.plans_left or o.detours]
        checked = Counter(o.check_verdict for o in self.outcomes if o.check_verdict is not None)
        return {"models": len(self.outcomes), "counts": {k: counts.get(k, 0) for k in OUTCOMES},
                "commits": dict(sorted(Counter(o.commit or "unknown" for o in self.outcomes).items())),
                "check_verdicts": dict(sorted(checked.items())),
                "passed_on_a_simpler_plan": sum(1 for o in self.outcomes
                                                if o.outcome == "passed" and (o.plans_left or o.detours)),
                "reasons": _grouped(failed, reason_key), "first_plan_left": _grouped(first_left, plan_left_key)}

    def write(self) -> None:
        """Rewrite fuzz.json whole (a temporary file, then a rename: never half written)."""
        import torch

        c = self.config
        self.outcomes.sort(key=lambda o: o.seed)
        record = {"seed": c.seed, "count": c.count, "gpu": c.gpu, "gpu_ids": list(c.gpu_ids),
                  "timeout_s": c.timeout_s, "jobs": c.jobs,
                  "check": c.check_argv(Path("{model}"), Path("{candidate}"), Path("{json}")) if c.check else None,
                  "command": c.argv(Path("{model}"), Path("{out}")), "python": sys.version.split()[0],
                  "torch": torch.__version__, "summary": self.summary(),
                  "models": [asdict(o) for o in self.outcomes]}
        tmp = self.record_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        os.replace(tmp, self.record_path)


def run_campaign(config: CampaignConfig, progress: Callable[[str], None] = print) -> Campaign:
    """Generate and optimize config.count models, config.jobs at a time; one progress line per model. The
    outcomes OUT/fuzz.json already holds for these seeds are kept, not run again."""
    for sub in ("models", "runs", "logs"):
        (config.out / sub).mkdir(parents=True, exist_ok=True)
    campaign = Campaign(config, recorded(config))
    done = {o.seed for o in campaign.outcomes}
    todo = [seed for seed in config.seeds() if seed not in done]
    if done:
        progress(f"{len(done)} model(s) already recorded in {campaign.record_path}; running the other {len(todo)}")
    lock = threading.Lock()

    def finished(outcome: Outcome) -> None:
        with lock:
            campaign.outcomes.append(outcome)
            campaign.write()
            detail = f": {outcome.reason}" if outcome.reason else ""
            if outcome.check_verdict is not None:
                detail += f" [check: {outcome.check_verdict}{': ' + outcome.check_reason if outcome.check_reason else ''}]"
            progress(f"[{len(campaign.outcomes)}/{config.count}] {Path(outcome.model).name} "
                     f"{' > '.join(outcome.ops)}: {outcome.outcome} ({outcome.seconds:.1f} s){detail}")

    _STOPPING.clear()
    pool = ThreadPoolExecutor(max_workers=max(1, config.jobs))
    try:
        with _stopped_runs_on_sigterm():
            for future in as_completed([pool.submit(run_model, config, seed, i) for i, seed in enumerate(todo)]):
                finished(future.result())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # after a SIGTERM: models not started never start
    return campaign


_RUNNING: set[subprocess.Popen] = set()  # the runs in flight, killed with the campaign (SIGTERM)
_STOPPING = threading.Event()  # set by the SIGTERM: no run starts any more


@contextlib.contextmanager
def _stopped_runs_on_sigterm():
    """A SIGTERM (a `timeout` around the campaign) kills the runs in flight, each its whole process group,
    then ends the campaign: what was recorded stays, the runs cut short are run again next time."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        _STOPPING.set()
        for proc in list(_RUNNING):
            _kill_group(proc)
        raise SystemExit(128 + signum)

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def recorded(config: CampaignConfig) -> list[Outcome]:
    """The outcomes of config's seeds in an earlier OUT/fuzz.json (none if there is none or it is unreadable)."""
    path = config.out / "fuzz.json"
    try:
        models = json.loads(path.read_text())["models"]
    except (OSError, ValueError, KeyError):
        return []
    seeds = set(config.seeds())
    fields = set(Outcome.__dataclass_fields__)
    return [Outcome(**{k: v for k, v in m.items() if k in fields}) for m in models if m.get("seed") in seeds]


def _grouped(items: list[tuple[str, Outcome]], key: Callable[[str], str]) -> list[dict]:
    groups: dict[str, list[tuple[str, Outcome]]] = {}
    for text, o in items:
        groups.setdefault(key(text), []).append((text, o))
    return [{"reason": key, "count": len(group), "example": group[0][0],
             "models": [Path(o.model).stem for _, o in group]}
            for key, group in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))]


def write_model(out: Path, seed: int):
    model = generate(seed)
    path = out / "models" / f"{model.name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(model.source)
    return model, path


def run_model(config: CampaignConfig, seed: int, index: int = 0) -> Outcome:
    model, path = write_model(config.out, seed)
    run_dir, log_path = config.out / "runs" / model.name, config.out / "logs" / f"{model.name}.log"
    started = time.monotonic()
    code = _run(config.argv(path, run_dir), log_path, config.env(index), config.timeout_s)
    seconds = time.monotonic() - started
    text = log_path.read_text(errors="replace")
    if code is None:
        stage = last_stage(text)
        outcome, reason = "timeout", f"timed out after {config.timeout_s:g} s" + (f" in {stage}" if stage else "")
    elif code == 0:
        outcome, reason = "passed", ""
    elif code < 0:
        outcome, reason = "crashed", signal_reason(code)
    else:
        reason = failure_reason(text, path.name)
        outcome = "failed" if f"fuseforge: {path.name}: " in text else "crashed"
    report = run_dir / "report.md"
    kept, left = plans_left(report.read_text(errors="replace")) if report.is_file() else (None, [])
    result = Outcome(str(path), seed, list(model.ops), outcome, code, reason, detours(text), kept, left,
                     round(seconds, 2), str(log_path), str(run_dir), commit=commit())
    if config.check and config.gpu and outcome == "passed":
        result.check_verdict, result.check_reason = check_model_new(config, path, run_dir, index)
    return result


def check_model_new(config: CampaignConfig, model: Path, run_dir: Path, index: int = 0) -> tuple[str, str]:
    """`fuseforge check` on the ModelNew a run verified (run_dir/model_new.py): its verdict and one-line
    reason ("missing" when the run wrote no model_new.py)."""
    candidate = run_dir / "model_new.py"
    if not candidate.is_file():
        return "missing", "optimize exited 0 without a verified model_new.py"
    record_path, log_path = run_dir / "check.json", run_dir / "check.log"
    argv = config.check_argv(model, candidate, record_path)
    env = {k: v for k, v in config.env(index).items() if k not in (lease.LEASE_ENV, lease.LOG_ENV)}
    code = _run(argv, log_path, env, config.timeout_s)
    try:
        record = json.loads(record_path.read_text())
        return record["verdict"], (record.get("reason") or "").splitlines()[0] if record.get("reason") else ""
    except (OSError, ValueError, KeyError):
        text = log_path.read_text(errors="replace") if log_path.is_file() else ""
        return "error", ("timed out" if code is None else failure_reason(text, candidate.name))


def _run(argv: list[str], log_path: Path, env: dict, timeout_s: float) -> int | None:
    """Run argv in its own session with stdout and stderr to log_path; its exit code, None if killed at the
    timeout."""
    if _STOPPING.is_set():
        return None
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
        _RUNNING.add(proc)
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return None
        finally:
            _RUNNING.discard(proc)


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the run and whatever it started (its own session, so its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def summary_lines(summary: dict) -> list[str]:
    counts = summary["counts"]
    head = f"fuzz: {summary['models']} models: " + ", ".join(f"{counts[k]} {k}" for k in OUTCOMES)
    commits = summary.get("commits") or {}
    if commits:
        head += " at " + (next(iter(commits)) if len(commits) == 1 else
                          "commits " + ", ".join(f"{c} ({n})" for c, n in commits.items()))
    if summary.get("check_verdicts"):
        head += "; check of each verified ModelNew: " + ", ".join(
            f"{n} {verdict}" for verdict, n in summary["check_verdicts"].items())
    if summary["passed_on_a_simpler_plan"]:
        head += f" ({summary['passed_on_a_simpler_plan']} passed on a simpler plan than the first)"
    reasons = summary["reasons"]
    lines = [f"{head}; {len(reasons)} distinct failure reason(s){':' if reasons else ''}", *_listed(reasons)]
    if summary["first_plan_left"]:
        lines.append(f"{len(summary['first_plan_left'])} distinct reason(s) the first plan was left for a simpler one:")
        lines += _listed(summary["first_plan_left"])
    return lines


def _listed(groups: list[dict]) -> list[str]:
    return [f"  {g['count']:3d} x {g['example']}  ({', '.join(g['models'][:4])}{', ...' if len(g['models']) > 4 else ''})"
            for g in groups]
