"""The report's charts (PNG, matplotlib's Agg renderer, no pyplot state) and its HTML page.

    speedup_png(rows)   horizontal bars per job: speedup vs eager and vs torch.compile (log scale, 1x line);
                        jobs without a correct timing are listed with their verdict at the left edge
    roofline_png(rows)  achieved TFLOP/s against arithmetic intensity (FLOPs / minimum bytes), for ours and
                        eager, under the ceilings (memory bandwidth diagonal, compute rates)
    html_page(...)      one self-contained page: explanation, totals, the charts (base64), the job table
"""

from __future__ import annotations

import base64
import html
import io
import json
import math

from ..rates import BANDWIDTH, CONV_FLOPS, SGEMM_FLOPS
from .report import FAST_P, job_table, totals_table, verdict_of

DEFAULT_CEILINGS = {"sgemm_flops": SGEMM_FLOPS, "conv_flops": CONV_FLOPS, "bandwidth": BANDWIDTH}


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return buffer.getvalue()


def _label(row: dict, with_gpu: bool) -> str:
    cand = row.get("candidate")
    return row["model_name"] + (f" / {cand.rsplit('/', 1)[-1]}" if cand else "") + (
        f" [{row['gpu']}]" if with_gpu and row.get("gpu") else "")


def speedup_png(rows: list[dict]) -> bytes:
    from matplotlib.figure import Figure

    timed = sorted((r for r in rows if verdict_of(r) == "correct" and r.get("speedup_vs_eager")),
                   key=lambda r: r["speedup_vs_eager"])
    untimed = [r for r in rows if not any(r is t for t in timed)]
    with_gpu = len({r.get("gpu") for r in rows if r.get("gpu")}) > 1
    labels = [_label(r, with_gpu) for r in untimed + timed]
    fig = Figure(figsize=(9, 1.2 + 0.32 * max(1, len(labels))))
    ax = fig.add_subplot()
    ys = range(len(labels))
    offset = len(untimed)
    eager = [r["speedup_vs_eager"] for r in timed]
    comp = [r.get("speedup_vs_compile") or math.nan for r in timed]
    for shift, values, color, label in ((0.2, eager, "#2b7bba", "vs eager"),
                                        (-0.2, comp, "#f28e2b", "vs torch.compile")):  # bars from 1x
        ax.barh([y + offset + shift for y in range(len(timed))], [v - 1 for v in values], left=1, height=0.4,
                color=color, label=label)
    ax.set_xscale("log", base=2)
    values = [v for v in eager + comp if v == v] or [1.0]
    low, high = min(min(values), 1.0) / 1.25, max(max(values), 1.0) * 1.25
    ax.set_xlim(low, high)
    # ticks close to 1 only when the axis is narrow enough for their labels not to overlap
    near_one = (0.75, 1.25, 1.5) if high / low < 8 else ()
    ticks = sorted(t for t in (1 / 8, 1 / 4, 1 / 2, 1, 2, 4, 8, 16, 32, 64, *near_one) if low <= t <= high)
    ax.set_xticks(ticks, [f"{t:g}x" for t in ticks])
    ax.minorticks_off()
    for y, r in enumerate(untimed):
        ax.text(low * 1.03, y, verdict_of(r), va="center", fontsize=8, color="#c0392b")
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks(list(ys), labels, fontsize=8)
    ax.set_ylim(-0.7, len(labels) - 0.3)
    ax.set_xlabel("speedup (median time of the baseline / ours; > 1: fuseforge is faster)")
    ax.set_title("fuseforge speedup per job")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def _ceilings(rows: list[dict]) -> dict:
    for r in rows:
        roof = json.loads(r["roofline_json"]) if r.get("roofline_json") else {}
        if roof.get("ceilings"):
            return roof["ceilings"]
    return DEFAULT_CEILINGS


def roofline_png(rows: list[dict]) -> bytes:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5.5))
    ax = fig.add_subplot()
    points = [r for r in rows if r.get("flops") and r.get("min_bytes")]
    ax.set_title("Roofline: achieved throughput vs arithmetic intensity")
    if not points:
        ax.text(0.5, 0.5, "no roofline data: no job wrote suite_roofline.json", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_axis_off()
        return _png(fig)
    ceil = _ceilings(rows)
    intensity = [r["flops"] / r["min_bytes"] for r in points]
    ridge = ceil["sgemm_flops"] / ceil["bandwidth"]
    lo, hi = min(*intensity, ridge) / 4, max(*intensity, ridge) * 4
    xs = [lo * (hi / lo) ** (i / 100) for i in range(101)]
    for name, rate, style in (("fp32 SGEMM", ceil["sgemm_flops"], "-"), ("conv (TF32)", ceil["conv_flops"], ":")):
        ax.plot(xs, [min(rate, ceil["bandwidth"] * x) / 1e12 for x in xs], style, color="gray",
                label=f"ceiling: {rate / 1e12:.0f} TFLOP/s {name}, {ceil['bandwidth'] / 1e12:.2f} TB/s")
    for key, marker, label in (("ours_ms", "o", "fuseforge"), ("eager_ms", "x", "eager")):
        pts = [(i, r["flops"] / (r[key] / 1e3) / 1e12) for i, r in zip(intensity, points) if r.get(key)]
        if pts:
            ax.scatter(*zip(*pts), marker=marker, label=label, zorder=3)
    for i, r in zip(intensity, points):
        if r.get("ours_ms"):
            ax.annotate(r["model_name"], (i, r["flops"] / (r["ours_ms"] / 1e3) / 1e12), fontsize=6,
                        xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs / minimum bytes moved)")
    ax.set_ylabel("achieved TFLOP/s (FLOPs / median time)")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3, which="both")
    return _png(fig)


EXPLANATION = """Each job ran fuseforge on one model file (<code>optimize</code>) or graded one candidate
file against its model (<code>check</code>), in its own process, with one GPU to itself. <b>Verdict</b>:
<i>correct</i> means the output's error against a float64 run of the original model stayed within twice the
error of eager PyTorch in fp32 (several seeds, two input distributions); <i>incorrect</i> that it did not;
<i>build_failed</i> that the CUDA code did not compile; <i>error</i> and <i>timeout</i> that the job crashed or
ran out of time (they are retried by the next run); <i>cpu_only</i> that only the CPU-side checks ran (no
GPU). <b>Times</b> are medians of many calls with the L2 cache flushed; <b>vs eager</b> and <b>vs
compile</b> are the baseline's time divided by ours (above 1: fuseforge is faster). <b>fast_p</b> is the
share of all jobs that are correct and more than p times faster than eager. The <b>floor</b> is the
roofline bound (FLOPs and minimum bytes over the measured H100 ceilings): no implementation can be faster,
so a time below it is a measurement bug until explained."""


def _table(headers: list[str], cells: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in cells)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _runs(runs: list[dict]) -> str:
    items = []
    for r in runs:
        env = json.loads(r["environment"] or "{}")
        gpus = ", ".join(sorted({g.get("name") or f"id {g.get('id')}" for g in env.get("gpus", [])})) or "no GPU"
        text = (f"run {r['id']}: {r['started']} to {r['finished'] or '(killed)'} on {r['host']}, {gpus}, "
                f"torch {env.get('torch')}, fuseforge {env.get('commit')}")
        items.append(f"<li>{html.escape(text)}</li>")
    return "<ul>" + "".join(items) + "</ul>"


def html_page(rows: list[dict], runs: list[dict], speedup: bytes, roofline: bytes, title: str) -> str:
    img = "<img alt='{0}' src='data:image/png;base64,{1}'>"
    fast = ", ".join(f"fast_{p:g}" for p in FAST_P)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:1200px;margin:2em auto}} table{{border-collapse:collapse;
font-size:13px}} td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}} td:first-child{{text-align:left}}
img{{max-width:100%}}</style></head><body>
<h1>{html.escape(title)}</h1>
<p>{EXPLANATION}</p>
<h2>Runs</h2>{_runs(runs)}
<h2>Totals ({fast})</h2>{_table(*totals_table(rows))}
<h2>Speedup</h2>{img.format("speedup chart", base64.b64encode(speedup).decode())}
<h2>Roofline</h2>{img.format("roofline chart", base64.b64encode(roofline).decode())}
<h2>Jobs</h2>{_table(*job_table(rows))}
</body></html>
"""
