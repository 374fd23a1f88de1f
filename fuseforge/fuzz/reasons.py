"""The one-line reason an optimize run did not pass, from its log, and the key that counts like reasons
together (numbers, names with a counter and the model's name made alike)."""

from __future__ import annotations

import re
import signal

_STAGE_LINE = re.compile(r"^\s*(?:\[[\d:]+\]\s*)?(\w.*?) …(?:\s|$)")  # the CLI's "[12:00:01] capture …"
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failed|Warning)\w*)(?::\s*(.*))?$")
MAX_REASON = 600
_SHAPE = re.compile(r"\[N(?:, N)*\]|\(N(?:, N)*,?\)")
_NUMBER = re.compile(r"(?<![A-Za-z])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def failure_reason(log: str, model_file: str) -> str:
    """What failed, in one line: the CLI's `fuseforge: MODEL.py: stage: message` line without the model's
    name (its first line where the message runs on), else the last exception line of a traceback, else the
    last line of the log."""
    lines = log.splitlines()
    prefix = f"fuseforge: {model_file}: "
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith(prefix):
            # the message with the lines it runs on to (a wrapped or multi-line message), up to a blank line
            # or the CLI's next line
            parts = [lines[i][len(prefix):].strip()]
            for line in lines[i + 1:]:
                if not line.strip() or line.startswith(("report", "fuseforge: ")):
                    break
                parts.append(line.strip())
            reason = " ".join(parts)
            return reason if len(reason) <= MAX_REASON else reason[:MAX_REASON - 3] + "..."
    for line in reversed(lines):
        match = _EXCEPTION_LINE.match(line.strip())
        if match:
            return line.strip()
    rest = [line.strip() for line in lines if line.strip()]
    return rest[-1] if rest else "no output"


def last_stage(log: str) -> str | None:
    """The stage the run was in when it stopped (the last `stage …` progress line)."""
    stages = [m.group(1) for line in log.splitlines() if (m := _STAGE_LINE.match(line))]
    return stages[-1] if stages else None


def detours(log: str) -> list[str]:
    """Progress lines other than a stage's name: a fallback to a simpler plan and the like."""
    return [m.group(1) for line in log.splitlines() if (m := _STAGE_LINE.match(line)) and not m.group(1).isidentifier()]


_PLAN_KEPT = re.compile(r"^The plan with (.+?)\.(?: Plans tried before it:| Other plans tried:)?$")
_ARTEFACTS = re.compile(r"\.? Its artefacts: .*$")


def plans_left(report: str) -> tuple[str | None, list[str]]:
    """From a run's report.md: the plan kept, and 'PLAN failed at STAGE: reason' for each plan left before
    it (optimize's ladder of plans); (None, []) where the report does not say."""
    kept, left = None, []
    for line in report.splitlines():
        if kept is None and (m := _PLAN_KEPT.match(line)):
            kept = m.group(1)
        elif line.startswith("- The plan with "):
            left.append(_ARTEFACTS.sub("", line[len("- The plan with "):]))
    return kept, left


def signal_reason(returncode: int) -> str:
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"killed by {name}"


def reason_key(reason: str) -> str:
    """`reason` with every number (sizes, errors, counters as in c_lifted_tensor_0, fuzz_000012) as N, and
    every shape as [...]."""
    return _SHAPE.sub("[...]", _NUMBER.sub("N", reason))


def plan_left_key(line: str) -> str:
    """The key of a 'PLAN failed at STAGE: reason' line: its reason's, whatever the plan."""
    _, sep, rest = line.partition(" failed at ")
    return reason_key(f"failed at {rest}" if sep else line)
