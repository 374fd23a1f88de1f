"""`fuseforge report DB`: a table per job and totals per GPU, from the suite's database.

Pure functions over job rows (dicts with the columns of the `jobs` table, see db.py):

    latest(rows)      one row per job key: its latest "done" row, else its latest row
    group_of(row)     (kind, "GPU" or "no GPU"): totals are per group of the same settings, as job keys are
                      (a GPU run and a CPU-only run of one model are two jobs; two GPU models are not)
    fast_p(rows, p)   KernelBench's fast_p: the fraction of all jobs that are correct and more than p times
                      faster than eager (fast_0 is the correct rate: a correct job needs no timing for it)
    totals(rows)      jobs, correct, correct rate, fast_p for FAST_P, geometric mean speedups of the correct
                      timed jobs vs eager and vs torch.compile, median GPU seconds per job (gpu_s)
    job_table(rows), totals_table(rows)   headers and string cells, shared by the terminal and the HTML
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter

from rich.console import Console
from rich.table import Table

FAST_P = (0.0, 1.0, 1.2, 1.5, 2.0)
VERDICT_STYLE = {"correct": "green", "incorrect": "red", "build_failed": "red", "error": "bold red",
                 "timeout": "bold red", "cpu_only": "yellow", "unavailable": "dim", "interrupted": "yellow"}


def verdict_of(row: dict) -> str:
    return row.get("verdict") or row["status"]


def latest(rows: list[dict]) -> list[dict]:
    by_key: dict[str, dict] = {}
    for row in sorted(rows, key=lambda r: r["id"]):
        previous = by_key.get(row["job_key"])
        if previous is None or previous["status"] != "done" or row["status"] == "done":
            by_key[row["job_key"]] = row
    return sorted(by_key.values(), key=lambda r: (group_of(r), r["model_name"], r.get("candidate") or ""))


def group_of(row: dict) -> tuple[str, str]:
    return row["kind"], "GPU" if json.loads(row["settings"]).get("gpu") else "no GPU"


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def fast_p(rows: list[dict], p: float) -> float | None:
    if not rows:
        return None
    fast = [r for r in rows if verdict_of(r) == "correct"
            and (p == 0 or (r.get("speedup_vs_eager") is not None and r["speedup_vs_eager"] > p))]
    return len(fast) / len(rows)


def totals(rows: list[dict]) -> dict:
    correct = [r for r in rows if verdict_of(r) == "correct"]
    return {
        "jobs": len(rows), "correct": len(correct), "correct_rate": len(correct) / len(rows) if rows else None,
        "fast_p": {p: fast_p(rows, p) for p in FAST_P},
        "geomean_vs_eager": geomean([r.get("speedup_vs_eager") for r in correct]),
        "geomean_vs_compile": geomean([r.get("speedup_vs_compile") for r in correct]),
        "timed": sum(r.get("speedup_vs_eager") is not None for r in correct),
        "verdicts": dict(Counter(verdict_of(r) for r in rows)),
        "median_gpu_s": median_gpu_s(rows),
    }


def median_gpu_s(rows: list[dict]) -> float | None:
    """The median of the jobs' GPU seconds (the time each held its GPU), over the jobs that say it."""
    values = [r["gpu_s"] for r in rows if isinstance(r.get("gpu_s"), (int, float))]
    return statistics.median(values) if values else None


def groups(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    out: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        out.setdefault(group_of(row), []).append(row)
    return out


def _f(value, spec: str, suffix: str = "") -> str:
    return "—" if value is None else format(value, spec) + suffix


def _name(row: dict) -> str:
    cand = row.get("candidate")
    return row["model_name"] + (f" / {cand.rsplit('/', 1)[-1]}" if cand else "")


def _floor(row: dict) -> str:
    floor, ours = row.get("floor_ms"), row.get("ours_ms")
    if floor is None:
        return "—"
    text = f"{floor:.3f}"
    if ours:
        text += " (below the floor!)" if ours < floor else f" ({floor / ours:.0%})"
    return text


JOB_HEADERS = ["model", "verdict", "error vs fp64 (eager's)", "ours ms", "eager ms", "compile ms", "vs eager",
               "vs compile", "floor ms (% reached)", "peak MiB", "GPU s", "GPU", "note"]
NOTE_MAX = 300  # characters of a reason shown in the note column (the database keeps the whole line)


def job_table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Headers and cells per job; the GPU column only when the jobs ran on several kinds of GPU."""
    cells = []
    for r in rows:
        error = "—" if r.get("cand_rel_err") is None else (
            f"{r['cand_rel_err']:.1e} ({_f(r.get('eager_rel_err'), '.1e')})")
        compile_ms = _f(r.get("compile_ms"), ".3f") + (" (cached)" if r.get("compile_cached") else "")
        eager_ms = _f(r.get("eager_ms"), ".3f") + (" (cached)" if r.get("eager_cached") else "")
        peak = None if r.get("ours_peak_bytes") is None else r["ours_peak_bytes"] / 2**20
        reason = r.get("reason") or ""
        note = "" if verdict_of(r) == "correct" else (reason if len(reason) <= NOTE_MAX else reason[:NOTE_MAX - 3] + "...")
        cells.append([_name(r), verdict_of(r), error, _f(r.get("ours_ms"), ".3f"), eager_ms,
                      compile_ms, _f(r.get("speedup_vs_eager"), ".2f", "x"), _f(r.get("speedup_vs_compile"), ".2f", "x"),
                      _floor(r), _f(peak, ".1f"), _f(r.get("gpu_s"), ".1f"), r.get("gpu") or "—", note])
    if len({r.get("gpu") for r in rows if r.get("gpu")}) < 2:
        return JOB_HEADERS[:-2] + JOB_HEADERS[-1:], [c[:-2] + c[-1:] for c in cells]
    return JOB_HEADERS, cells


TOTAL_HEADERS = ["kind", "GPUs", "jobs", "correct", *[f"fast_{p:g}" for p in FAST_P], "geomean vs eager",
                 "geomean vs compile", "median GPU s", "verdicts"]


def totals_table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    cells = []
    for (kind, mode), members in groups(rows).items():
        t = totals(members)
        names = ", ".join(sorted({r["gpu"] for r in members if r.get("gpu")})) or "unknown"
        cells.append([kind, names if mode == "GPU" else "none (CPU stages only)", str(t["jobs"]), f"{t['correct']} ({t['correct_rate']:.0%})",
                      *[f"{t['fast_p'][p]:.0%}" for p in FAST_P],
                      _f(t["geomean_vs_eager"], ".3f", "x"), _f(t["geomean_vs_compile"], ".3f", "x"),
                      _f(t["median_gpu_s"], ".1f"), ", ".join(f"{v} {k}" for k, v in sorted(t["verdicts"].items()))])
    return TOTAL_HEADERS, cells


def _rich(title: str, headers: list[str], cells: list[list[str]], verdict_column: int | None) -> Table:
    table = Table(title=title, title_justify="left")
    for h in headers:
        wrap = h in ("model", "note", "verdicts", "GPUs", "GPU")
        left = wrap or h in ("verdict", "kind")
        table.add_column(h, overflow="fold", no_wrap=not wrap, justify="left" if left else "right")
    for row in cells:
        styled = list(row)
        if verdict_column is not None:
            styled[verdict_column] = f"[{VERDICT_STYLE.get(row[verdict_column], 'white')}]{row[verdict_column]}[/]"
        table.add_row(*styled)
    return table


def print_report(rows: list[dict], console: Console) -> None:
    rows = latest(rows)
    if not rows:
        console.print("no jobs in this database yet")
        return
    console.print(_rich("jobs (latest result of each)", *job_table(rows), verdict_column=1))
    console.print(_rich("totals (fast_p: share of all jobs correct and > p x faster than eager)",
                        *totals_table(rows), verdict_column=None))
