"""The terminal summary of a check record (rich markup), and the JSON file."""

from __future__ import annotations

import json
from pathlib import Path

from fuseforge.check.kinds import KINDS
from fuseforge.records import json_safe

_COLOUR = {"correct": "green", "incorrect": "red", "interface_mismatch": "red", "build_failed": "red",
           "invalid_python": "red", "error": "yellow"}


def to_json(record: dict) -> str:
    return json.dumps(json_safe(record), indent=2, allow_nan=False, default=str) + "\n"


def write_json(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_json(record))


def _num(x, spec: str = ".3g") -> str:
    return format(x, spec) if isinstance(x, (int, float)) else "n/a"


def _esc(text) -> str:
    return str(text).replace("[", "\\[")


def summary(record: dict) -> list[str]:
    """Lines for the terminal (rich markup): verdict, reason, the evidence that matters for it, checks."""
    verdict = record["verdict"]
    colour = "magenta" if verdict.startswith("cheat:") else _COLOUR.get(verdict, "white")
    lines = [f"[bold {colour}]{verdict}[/]  {Path(record['candidate']).name} vs {Path(record['model']).name}"
             f" on {record['device']}" + (f"  (check: {record['check']})" if record.get("check") else "")]
    if verdict.startswith("cheat:"):
        lines.append(f"  {KINDS.get(verdict[6:], '')}")
    if record.get("reason"):
        lines.append(f"  reason: {_esc(record['reason'])}")
    build = record.get("build") or {}
    for line in build.get("error_lines") or []:
        lines.append(f"  [dim]|[/] {_esc(line)}")
    worst = record.get("worst")
    if worst and verdict in ("incorrect", "correct") or verdict == "cheat:precision_downgrade" and worst:
        lines.append(f"  worst: {worst['case']}, {worst['name']}: error vs fp64 {_num(worst['cand_err'])} "
                     f"(rel. {_num(worst['cand_rel_err'])}), eager's {_num(worst['ref_err'])} (rel. "
                     f"{_num(worst['ref_rel_err'])}), bound {_num(worst['bound'])} -> {_num(worst['ratio'], '.2f')}"
                     " of the bound")
    for case in record.get("cases") or []:
        for e in case.get("worst_elements") or []:
            lines.append(f"    at {e['index']}: candidate {_num(e['candidate'], '.6g')}, truth {_num(e['truth'], '.6g')}"
                         f", eager {_num(e['eager'], '.6g')}")
        if case.get("worst_elements"):
            break
    lines += _timing_lines(record)
    lines += _check_lines(record)
    return lines


def _timing_lines(record: dict) -> list[str]:
    timing = record.get("timing") or {}
    if not timing.get("candidate"):
        return []
    cand, speedup = timing["candidate"], timing["speedup"]
    text = f"  time: candidate {_num(cand['median_ms'], '.4g')} ms (p10 {_num(cand['p10_ms'], '.4g')}, " \
           f"p90 {_num(cand['p90_ms'], '.4g')})"
    if timing.get("eager"):
        text += f"; eager {_num(timing['eager'].get('median_ms'), '.4g')} ms -> {_num(speedup['vs_eager'], '.2f')}x"
    if speedup.get("vs_compile"):
        text += f"; torch.compile {_num(timing['compile']['median_ms'], '.4g')} ms -> {_num(speedup['vs_compile'], '.2f')}x"
    if speedup.get("vs_compile_max_autotune"):
        text += f"; torch.compile max-autotune {_num(timing['compile_max_autotune']['median_ms'], '.4g')} ms -> " \
                f"{_num(speedup['vs_compile_max_autotune'], '.2f')}x"
    lines = [text + f"; {cand['trials']} calls, {timing['timer']}"]
    gpu = record.get("gpu") or {}
    if gpu.get("own_kernel_share") is not None:
        lines.append(f"  GPU time in the candidate's own kernels: {100 * gpu['own_kernel_share']:.1f}%")
    floor = (gpu.get("roofline") or {}).get("floor_ms")
    if floor:
        lines.append(f"  roofline floor: {_num(floor, '.4g')} ms")
    return lines


def _check_lines(record: dict) -> list[str]:
    checks = record.get("checks") or []
    hints = [f for f in record.get("findings") or [] if not f["decisive"]]
    lines = [f"  note: {f['check']}: {_esc(f['message'])}" + (f" (line {f['line']})" if f.get("line") else "")
             for f in hints]
    decided = record.get("check")
    others = sorted({f["check"] for f in record.get("findings") or [] if f["decisive"]} - {decided})
    if others:
        lines.append(f"  also fired: {', '.join(others)}")
    if (record.get("run") or {}).get("status") == "skipped":
        lines.append(f"  runtime checks not run: {record['run']['reason']}")
    elif checks:
        ran = [c for c in checks if c["ran"]]
        skipped = [c["name"] + (" (needs CUDA)" if c["needs"] == "gpu" else "") for c in checks if not c["ran"]]
        lines.append(f"  checks: {len(ran)} ran, {sum(c['fired'] for c in ran)} fired" +
                     (f"; not run: {', '.join(skipped)}" if skipped else ""))
    lines.append(f"  ({_num(record.get('wall_s'), '.1f')} s{_stages_text(record.get('stages') or {})})")
    return lines


def _stages_text(stages: dict) -> str:
    """': reference 120.3 (cases 80.1, ...), candidate 27.9 (...), grader 3.1 (judging 3.1)': each process's
    seconds, then its stages of 0.1 s or more."""
    parts = []
    for who, steps in stages.items():
        shown = ", ".join(f"{name} {seconds:.1f}" for name, seconds in steps if seconds >= 0.1)
        parts.append(f"{who} {sum(s for _, s in steps):.1f}" + (f" ({shown})" if shown else ""))
    return ": " + "; ".join(parts) if parts else ""
