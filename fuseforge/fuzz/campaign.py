"""A fuzz campaign: for each seed, write the model file, run `optimize` on it in its own process (a timeout,
its own process group: a hang or a crash ends that model's run, never the campaign), and record the outcome
in OUT/fuzz.json, rewritten after every model.

Outcomes: passed (exit code 0), failed (a stage failed: the CLI's one-line reason), crashed (any other
exit: a traceback, a signal), timeout. Layout of OUT: models/fuzz_SEED.py, runs/fuzz_SEED/ (optimize's
artefacts), logs/fuzz_SEED.log (its stdout and stderr), fuzz.json.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

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
    # the run of one model: arguments with {python}, {model}, {out} filled in (default: fuseforge optimize)
    command: Sequence[str] | None = None

    def seeds(self) -> range:
        return range(self.seed, self.seed + self.count)

    def argv(self, model: Path, out: Path) -> list[str]:
        template = list(self.command) if self.command else [
            "{python}", "-m", "fuseforge", "optimize", "{model}", "-o", "{out}",
            *([] if self.gpu else ["--no-gpu"]), *([] if self.compile_baseline else ["--no-compile"])]
        fill = {"{python}": sys.executable, "{model}": str(model), "{out}": str(out)}
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
        return {"models": len(self.outcomes), "counts": {k: counts.get(k, 0) for k in OUTCOMES},
                "passed_on_a_simpler_plan": sum(1 for o in self.outcomes
                                                if o.outcome == "passed" and (o.plans_left or o.detours)),
                "reasons": _grouped(failed, reason_key), "first_plan_left": _grouped(first_left, plan_left_key)}

    def write(self) -> None:
        """Rewrite fuzz.json whole (a temporary file, then a rename: never half written)."""
        import torch

        c = self.config
        record = {"seed": c.seed, "count": c.count, "gpu": c.gpu, "timeout_s": c.timeout_s,
                  "command": c.argv(Path("{model}"), Path("{out}")), "python": sys.version.split()[0],
                  "torch": torch.__version__, "summary": self.summary(),
                  "models": [asdict(o) for o in self.outcomes]}
        tmp = self.record_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        os.replace(tmp, self.record_path)


def run_campaign(config: CampaignConfig, progress: Callable[[str], None] = print) -> Campaign:
    """Generate and optimize config.count models, one at a time; one progress line per model."""
    for sub in ("models", "runs", "logs"):
        (config.out / sub).mkdir(parents=True, exist_ok=True)
    campaign = Campaign(config)
    for i, seed in enumerate(config.seeds()):
        outcome = run_model(config, seed)
        campaign.outcomes.append(outcome)
        campaign.write()
        detail = f": {outcome.reason}" if outcome.reason else ""
        progress(f"[{i + 1}/{config.count}] {Path(outcome.model).name} {' > '.join(outcome.ops)}: "
                 f"{outcome.outcome} ({outcome.seconds:.1f} s){detail}")
    return campaign


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


def run_model(config: CampaignConfig, seed: int) -> Outcome:
    model, path = write_model(config.out, seed)
    run_dir, log_path = config.out / "runs" / model.name, config.out / "logs" / f"{model.name}.log"
    # the CLI's rich console: one line per message; tracebacks plain, their last line the exception
    env = {**os.environ, "COLUMNS": "1000", "_TYPER_STANDARD_TRACEBACK": "1"}
    started = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(config.argv(path, run_dir), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=config.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            code = None
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
    return Outcome(str(path), seed, list(model.ops), outcome, code, reason, detours(text), kept, left,
                   round(seconds, 2), str(log_path), str(run_dir))


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
