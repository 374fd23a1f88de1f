"""The cost model's predicted speedup vs eager against a suite record's measured one, with convolutions priced by the
rates and by measured cuDNN times.

    .venv/bin/python scripts/cost_vs_measured.py RECORD.sqlite [RECORD.sqlite ...] --conv-times CONV_TIMES.json
        [--models DIR] [--only SUBSTRING] [--out TABLE.md]

For each model of the records (the latest correct job of each name wins; files looked up under --models,
default ../shared/problems): the CPU-side stages (`optimize --no-gpu`), then `cost.estimate` twice: as planned
without a GPU, and with the convolutions' rows of CONV_TIMES.json (the output of
`python -m fuseforge.evaluate.conv_precision MODELS --time --out`, matched by call) as the GPU stage would use
them: channels-last kept only where in class and measured faster (`layout_precision`), eager's and the plan's
convolutions at their measured times. Prints predicted / measured for both; within +-25 %: 0.75..1.25.
The plans are today's; the record's may be older, so a model whose plan changed since is compared with another
plan's time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sqlite3
import sys
import tempfile
from pathlib import Path

from fuseforge.config import OptimizeConfig
from fuseforge.cost import estimate, measurement_key
from fuseforge.evaluate.conv_precision import call_from_json
from fuseforge.layout_precision import graph_convolutions, kept_channels_last
from fuseforge.pipeline import optimize

CALL_FIELDS = ("input_shape", "weight_shape", "bias", "stride", "padding", "dilation", "transposed", "output_padding",
               "groups")


def measured_speedups(records: list[Path], only: str | None) -> dict[str, float]:
    out: dict[str, tuple[str, float]] = {}
    for db in records:
        rows = sqlite3.connect(db).execute(
            "select model_name, finished, speedup_vs_eager from jobs where status='done' and verdict='correct' "
            "and kind like 'optimize%'")
        for name, finished, speedup in rows:
            if speedup and (only is None or only in name) and (name not in out or finished > out[name][0]):
                out[name] = (finished, speedup)
    return {name: speedup for name, (_, speedup) in out.items()}


def conv_rows(path: Path) -> dict:
    rows = json.loads(path.read_text())["convolutions"]
    return {dataclasses.replace(call_from_json({k: r[k] for k in CALL_FIELDS}), bias=False): r for r in rows}


def predict(model: Path, by_call: dict) -> tuple[float, float, int]:
    """(rates' prediction, prediction with measured convolutions, convolutions measured)."""
    with tempfile.TemporaryDirectory() as out:
        run = optimize(OptimizeConfig(model_path=model, out_dir=Path(out), gpu=False))
    graph, plan = run.captured.graph, run.plan
    by_name = {n.name: n for n in graph.nodes}
    rows = {name: by_call[measurement_key(by_name[name])] for name in graph_convolutions(graph)
            if measurement_key(by_name[name]) in by_call}
    rated = estimate(run.eager_cost, run.captured, plan).speedup
    measured = plan.channels_last & set(rows)  # the others stay as the layout step chose them
    plan.channels_last = kept_channels_last(measured, rows, graph) | (plan.channels_last - measured)
    return rated, estimate(run.eager_cost, run.captured, plan, rows).speedup, len(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", nargs="+", type=Path)
    parser.add_argument("--conv-times", type=Path, required=True)
    parser.add_argument("--models", type=Path, default=Path("../shared/problems"))
    parser.add_argument("--only", help="models whose name contains this")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    by_call = conv_rows(args.conv_times)
    measured = measured_speedups(args.records, args.only)
    lines = ["| model | measured | predicted (rates) | / measured | predicted (measured convs) | / measured |",
             "|---|---|---|---|---|---|"]
    within = {"rates": 0, "measured": 0}
    for name in sorted(measured):
        files = list(args.models.glob(f"*/{name}.py"))
        if not files:
            continue
        rated, timed, n = predict(files[0], by_call)
        got = measured[name]
        r1, r2 = rated / got, timed / got
        within["rates"] += 0.75 <= r1 <= 1.25
        within["measured"] += 0.75 <= r2 <= 1.25
        lines.append(f"| {name} | {got:.2f}x | {rated:.2f}x | {r1:.2f} | {timed:.2f}x ({n} conv) | {r2:.2f} |")
        print(lines[-1], flush=True)
    total = len(lines) - 2
    lines.append(f"\nWithin +-25 % (predicted / measured in 0.75..1.25): rates {within['rates']} of {total}, "
                 f"measured convolutions {within['measured']} of {total}.")
    print(lines[-1])
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
