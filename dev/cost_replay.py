"""The cost model's prediction at this commit against what a GPU record measured, without a GPU.

    .venv/bin/python dev/cost_replay.py bench/results/2026-11-27d_h100/conv37_jobs.tgz [--only 67_ 87_] [--out F]

For each model run in the record (its jobs.tgz: OUT folders with 25_conv_precision.json and 60_bench.json), this
plans the model as `optimize` would on the GPU machine, with the GPU's measurements replayed from the record
instead of measured: eager's precision class of each convolution (the conv family's claim), which convolutions
stay channels-last (measured in class and faster) and, where the record timed them, the convolutions' times. Then
it prints the predicted speedup vs eager next to the measured one (60_bench.json), and whether this commit's plan
has the record's steps (20_partition.txt): where it does not, the measurement is of another plan and the ratio
says little. Issue 24 asks the prediction to be within +-25 % of the measurement on every conv model.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fuseforge.capture import capture  # noqa: E402
from fuseforge.config import OptimizeConfig  # noqa: E402
from fuseforge.cost import eager_cost, estimate  # noqa: E402
from fuseforge.families import switched_on  # noqa: E402
from fuseforge.families.conv.group import mark_measured  # noqa: E402
from fuseforge.layout import channels_last_convs  # noqa: E402
from fuseforge.layout_precision import kept_channels_last  # noqa: E402
from fuseforge.load import load_model_file  # noqa: E402
from fuseforge.partition import format_plan, partition  # noqa: E402
from fuseforge.rewrite import rewrite  # noqa: E402

PROBLEMS = Path(__file__).resolve().parents[2] / "shared" / "problems"


def _steps(partition_text: str) -> list[str]:
    """The step lines of a 20_partition.txt (kinds and names, without the detail lines)."""
    lines = partition_text.split("# why neighbours")[0].splitlines()
    return [ln.split("(")[0].strip() for ln in lines if ln.startswith(("kernel ", "torch "))]


def replay(model: Path, folder: Path) -> dict:
    rows_path = folder / "25_conv_precision.json"
    rows = json.loads(rows_path.read_text()) if rows_path.exists() else {}
    config = OptimizeConfig(model_path=model, out_dir=folder, gpu=True)
    captured = capture(load_model_file(model))
    eager = eager_cost(captured)
    rewrite(captured.graph, captured)
    mark_measured(captured.graph, {n: r for n, r in rows.items() if isinstance(r, dict)})
    plan = partition(captured.graph, switched_on(config), config.pointwise_kernels)
    plan.channels_last = channels_last_convs(plan, captured.graph)
    if rows:
        plan.channels_last = kept_channels_last(plan.channels_last, rows, captured.graph)
    cost = estimate(eager, captured, plan, rows)
    bench = json.loads((folder / "60_bench.json").read_text())
    variants = bench["variants"]
    measured = variants["eager"]["median_ms"] / variants["candidate"]["median_ms"]
    recorded = (folder / "20_partition.txt").read_text() if (folder / "20_partition.txt").exists() else ""
    return {"model": model.stem, "predicted": cost.speedup, "measured": measured,
            "ratio": cost.speedup / measured, "eager_ms_predicted": cost.eager_s * 1e3,
            "eager_ms_measured": variants["eager"]["median_ms"], "plan_ms_predicted": cost.plan_s * 1e3,
            "plan_ms_measured": variants["candidate"]["median_ms"],
            "same_plan": _steps(format_plan(plan)) == _steps(recorded)}


def replay_record(jobs: Path, only: list[str] = ()) -> list[dict]:
    """One row per model of the record `jobs` (a jobs.tgz) whose name starts with one of `only` (all if empty)."""
    work = Path(tempfile.mkdtemp())
    with tarfile.open(jobs) as tar:
        members = [m for m in tar.getmembers() if not only or any(f"/{p}" in m.name for p in only)]
        tar.extractall(work, members=members, filter="data")
    results = []
    for bench in sorted(work.glob("**/60_bench.json")):
        folder = bench.parent
        if "attempts" in folder.parts:
            continue
        name = folder.name.rsplit("-", 1)[0]
        model = next(PROBLEMS.glob(f"*/{name}.py"), None)
        if model is None or (only and not any(name.startswith(p) for p in only)):
            continue
        try:
            results.append(replay(model, folder))
        except Exception as exc:  # noqa: BLE001 - one model's failure is a row, the others go on
            results.append({"model": name, "error": repr(exc)})
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("jobs", type=Path, help="a record's jobs.tgz (optimize OUT folders)")
    parser.add_argument("--only", nargs="*", default=[], help="model name prefixes")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    results = replay_record(args.jobs, args.only)
    for row in results:
        name = row["model"]
        if "error" in row:
            print(f"{name:60s} error: {row['error'][:120]}")
        else:
            flag = "" if 0.75 <= row["ratio"] <= 1.25 else "  OUT of +-25 %"
            print(f"{name:60s} predicted {row['predicted']:6.2f}x measured {row['measured']:6.2f}x "
                  f"ratio {row['ratio']:.2f} | eager {row['eager_ms_predicted']:.3f}/{row['eager_ms_measured']:.3f}"
                  f" plan {row['plan_ms_predicted']:.3f}/{row['plan_ms_measured']:.3f} ms"
                  f"{'' if row['same_plan'] else '  (plan differs from the record)'}{flag}")
    ok = [r for r in results if "error" not in r]
    within = [r for r in ok if 0.75 <= r["ratio"] <= 1.25]
    print(f"{len(within)} of {len(ok)} within +-25 %; {sum(r['same_plan'] for r in ok)} with the record's plan")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
