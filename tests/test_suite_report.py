"""`fuseforge report` on the real H100 results of the 19 problem models (bench/results), plus fake failures."""

import base64
import io
import json
import re
import sqlite3
import statistics
from pathlib import Path

import pytest
from rich.console import Console

from fuseforge.suite.cli import report
from fuseforge.suite.db import Store
from fuseforge.suite.execute import VERDICTS, Outcome, collect
from fuseforge.suite.jobs import OPTIMIZE_BUILD, OPTIMIZE_RUN, Job, settings_json
from fuseforge.suite.report import fast_p, job_table, latest, totals

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "2026-11-21_optimize_problems_h100"
SUMMARY = {m["model"]: m for m in json.loads((RESULTS / "results.json").read_text())["models"]}
GPU_SETTINGS = settings_json("optimize", True, OPTIMIZE_BUILD, OPTIMIZE_RUN)
CEILINGS = {"sgemm_flops": 51.3e12, "conv_flops": 100e12, "bandwidth": 2.98e12}
ROOFLINES = {  # build.roofline() of these problem models (FLOPs, minimum bytes, floor ms)
    "gemm_mean_tanh": (137438959616.0, 167813120, 2.6791), "pointwise_two_inputs": (335544320.0, 805306368, 0.2702),
    "conv2d_batchnorm_relu": (38721814529.0, 402728720, 0.3879), "rmsnorm_residual": (268484608.0, 536887296, 0.1802)}


def _job(name: str, settings: str = GPU_SETTINGS) -> Job:
    return Job("optimize", Path(f"/problems/{name}.py"), name[:16], None, "", settings, RESULTS / name)


@pytest.fixture(scope="module")
def h100_db(tmp_path_factory) -> Path:
    """The 19 H100 results as the suite would store them, plus a crash and an incorrect job."""
    db = tmp_path_factory.mktemp("report") / "results.sqlite"
    store = Store(db)
    run = store.start_run({}, {"gpus": [{"id": "0", "name": "NVIDIA H100 80GB HBM3"}], "commit": "633a833"})
    for name in sorted(SUMMARY):
        job, outcome = _job(name), collect(RESULTS / name)
        outcome.verdict = VERDICTS[outcome.verify["verdict"]]
        if name in ROOFLINES:  # as the build phase writes it
            flops, min_bytes, floor_ms = ROOFLINES[name]
            outcome.roofline = {"flops": flops, "min_bytes": min_bytes, "floor_ms": floor_ms, "ceilings": CEILINGS}
            outcome.metrics.update(flops=flops, min_bytes=min_bytes, floor_ms=floor_ms)
        store.finish_job(store.start_job(run, job, 1, "gpu0"), job, outcome)
    env = {"gpu": "NVIDIA H100 80GB HBM3"}
    store.finish_job(store.start_job(run, _job("crashy"), 1, "gpu0"), _job("crashy"),
                     Outcome("failed", "error", "run phase killed by SIGSEGV", environment=env))
    store.finish_job(store.start_job(run, _job("wrong"), 1, "gpu0"), _job("wrong"),
                     Outcome("done", "incorrect", "output: wrong", environment=env))
    store.close()
    return db


@pytest.fixture(scope="module")
def rows(h100_db) -> list[dict]:
    store = Store(h100_db)
    try:
        return latest(store.rows())
    finally:
        store.close()


def test_the_metrics_read_from_the_h100_artefacts_match_the_runner_summary(rows):
    by_name = {r["model_name"]: r for r in rows}
    for name, s in SUMMARY.items():
        r = by_name[name]
        assert r["verdict"] == s["verdict"] == "correct"
        assert (r["ours_ms"], r["eager_ms"], r["compile_ms"]) == (s["candidate_ms"], s["eager_ms"], s["compile_ms"])
        assert (r["speedup_vs_eager"], r["speedup_vs_compile"]) == (s["speedup_vs_eager"], s["speedup_vs_compile"])
        assert (r["cand_rel_err"], r["eager_rel_err"]) == (s["worst_rel_err"], s["eager_rel_err"])
        assert r["ours_peak_bytes"] == s["candidate_peak_bytes"] and r["allclose"] == 1
        assert r["gpu"] == "NVIDIA H100 80GB HBM3" and r["torch"] == "2.11.0+cu130"


def test_totals_of_the_h100_results_count_the_failed_jobs_too(rows):
    speedups = [s["speedup_vs_eager"] for s in SUMMARY.values()]
    t = totals(rows)
    assert (t["jobs"], t["correct"], t["timed"]) == (21, 19, 19)
    assert t["fast_p"] == {p: pytest.approx(sum(x > p for x in speedups) / 21) if p else pytest.approx(19 / 21)
                           for p in (0.0, 1.0, 1.2, 1.5, 2.0)}
    assert t["fast_p"][1.0] == pytest.approx(5 / 21) and t["fast_p"][2.0] == pytest.approx(1 / 21)
    assert t["geomean_vs_eager"] == pytest.approx(statistics.geometric_mean(speedups))
    assert t["geomean_vs_compile"] == pytest.approx(
        statistics.geometric_mean([s["speedup_vs_compile"] for s in SUMMARY.values()]))
    assert t["verdicts"] == {"correct": 19, "error": 1, "incorrect": 1}


def _row(i, key, status, verdict, speedup=None, gpu=True):
    return {"id": i, "job_key": key, "status": status, "verdict": verdict, "speedup_vs_eager": speedup,
            "kind": "optimize", "model_name": key, "settings": json.dumps({"gpu": gpu})}


def test_latest_keeps_the_last_done_row_of_a_job_over_later_failures_and_earlier_rows():
    rows = [_row(1, "a", "failed", "error"), _row(2, "a", "done", "correct", 1.1), _row(3, "a", "failed", "timeout"),
            _row(4, "b", "done", "incorrect"), _row(5, "b", "done", "correct", 2.0), _row(6, "c", "interrupted", None)]
    assert [r["id"] for r in latest(rows)] == [2, 5, 6]


def test_fast_p_needs_strictly_more_than_p_and_counts_every_job_in_the_denominator():
    rows = [_row(1, "a", "done", "correct", 1.0), _row(2, "b", "done", "correct", 1.5),
            _row(3, "c", "done", "incorrect", 3.0), _row(4, "d", "failed", "timeout")]
    assert [fast_p(rows, p) for p in (0, 1.0, 1.2, 1.5)] == [0.5, 0.25, 0.25, 0.0]


def test_totals_are_kept_apart_for_gpu_runs_and_cpu_only_runs(h100_db):
    store = Store(h100_db)
    rows = store.rows()
    store.close()
    cpu_only = [{**rows[0], "id": 10**6, "job_key": "cpu-only", "status": "done", "verdict": "cpu_only",
                 "settings": settings_json("optimize", False, OPTIMIZE_BUILD, OPTIMIZE_RUN)}]
    out = io.StringIO()
    from fuseforge.suite.report import print_report

    print_report(rows + cpu_only, Console(file=out, width=300))
    text = out.getvalue()
    assert re.search(r"optimize\s+│\s+NVIDIA H100 80GB HBM3\s+│\s+21\s+│\s+19 \(90%\)", text)
    assert re.search(r"optimize\s+│\s+none \(CPU stages only\)\s+│\s+1\s+│\s+0 \(0%\)", text)


def test_the_terminal_report_lists_every_job_with_its_verdict_and_the_totals(h100_db, capsys):
    out = io.StringIO()
    assert report(h100_db, console=Console(file=out, width=300)) == 0
    text = out.getvalue()
    for name in [*SUMMARY, "crashy", "wrong"]:
        assert name in text
    assert "run phase killed by SIGSEGV" in text and "fast_1.5" in text
    assert f"{statistics.geometric_mean(s['speedup_vs_eager'] for s in SUMMARY.values()):.3f}x" in text
    assert "3.19x" in text  # pointwise_two_inputs vs eager


def test_a_time_below_the_roofline_floor_is_flagged_and_one_above_shows_the_share_reached():
    base = {"model_name": "m", "status": "done", "verdict": "correct", "floor_ms": 1.0}
    _, cells = job_table([{**base, "ours_ms": 0.5}, {**base, "ours_ms": 4.0}])
    assert "below the floor!" in cells[0][8] and cells[1][8] == "1.000 (25%)"


def test_the_html_page_explains_itself_and_embeds_the_speedup_and_roofline_charts(h100_db, tmp_path):
    page = tmp_path / "site" / "index.html"
    assert report(h100_db, page, Console(file=io.StringIO())) == 0
    text = page.read_text()
    assert "Each job ran fuseforge on one model file" in text and "fast_p" in text
    images = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", text)
    assert len(images) == 2 and all(base64.b64decode(i).startswith(b"\x89PNG") for i in images)
    for chart in ("index_speedup.png", "index_roofline.png"):
        assert (tmp_path / "site" / chart).read_bytes().startswith(b"\x89PNG")
    for name in [*SUMMARY, "crashy"]:
        assert name in text
    assert "633a833" in text  # the runs section says what was measured


def test_report_of_a_missing_file_or_a_foreign_sqlite_file_exits_2(tmp_path):
    assert report(tmp_path / "missing.sqlite", console=Console(file=io.StringIO())) == 2
    foreign = sqlite3.connect(tmp_path / "foreign.sqlite")
    foreign.execute("CREATE TABLE t (x)")
    foreign.commit()
    assert report(tmp_path / "foreign.sqlite", console=Console(file=io.StringIO())) == 2
