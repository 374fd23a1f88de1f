"""The suite's SQLite file: documented schema, WAL, resume bookkeeping, baselines."""

import re
import sqlite3
import subprocess
import sys

import pytest

from fuseforge.suite import db as suite_db
from fuseforge.suite.db import SCHEMA_VERSION, SchemaError, Store
from fuseforge.suite.execute import Outcome
from fuseforge.suite.fake_job import write_model
from fuseforge.suite.jobs import SuiteConfig, plan


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "r.sqlite")
    yield s
    s.close()


@pytest.fixture
def job(tmp_path):
    [j] = plan(SuiteConfig(models=write_model(tmp_path / "m.py"), db=tmp_path / "r.sqlite"), gpus=1)
    return j


def test_a_new_database_is_in_wal_mode_with_its_schema_version_and_the_three_tables(tmp_path, store):
    conn = sqlite3.connect(tmp_path / "r.sqlite")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"schema_version", "runs", "jobs", "baselines"} <= tables


def test_every_column_of_every_table_is_documented_in_the_module_docstring(store):
    doc = set(re.findall(r"\w+", suite_db.__doc__))
    for table in ("runs", "jobs", "baselines"):
        columns = [r[1] for r in store.conn.execute(f"PRAGMA table_info({table})")]
        assert not [c for c in columns if c not in doc], table


def test_a_database_of_another_schema_version_or_a_foreign_sqlite_file_is_refused(tmp_path, store):
    store.conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    with pytest.raises(SchemaError, match="schema version"):
        Store(tmp_path / "r.sqlite")
    foreign = sqlite3.connect(tmp_path / "other.sqlite")
    foreign.execute("CREATE TABLE t (x)")
    foreign.commit()
    with pytest.raises(SchemaError, match="not a fuseforge suite database"):
        Store(tmp_path / "other.sqlite")


def test_history_counts_failures_and_attempts_and_knows_when_a_job_is_done(store, job):
    run = store.start_run({}, {})
    assert store.history(job.key) == (False, 0, 0)
    store.finish_job(store.start_job(run, job, 1, "gpu0"), job, Outcome("failed", "error"))
    store.start_job(run, job, 1, "-", status="unavailable")  # not an attempt
    store.start_job(run, job, 2, "gpu0")
    store.interrupt_running(run)  # an attempt, but not the job's failure
    assert store.history(job.key) == (False, 1, 2)
    store.finish_job(store.start_job(run, job, 3, "gpu0"), job, Outcome("done", "incorrect"))
    assert store.history(job.key) == (True, 1, 3)


def test_rows_left_running_by_a_dead_run_become_interrupted_and_a_live_runs_rows_stay(store, job):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead_run, live_run = store.start_run({}, {}), store.start_run({}, {})
        store.conn.execute("UPDATE runs SET pid = ? WHERE id = ?", (int(dead.stdout), dead_run))
        store.conn.execute("UPDATE runs SET pid = ? WHERE id = ?", (live.pid, live_run))
        store.start_job(dead_run, job, 1, "gpu0")
        store.start_job(live_run, job, 1, "gpu1")
        assert store.recover_interrupted() == 1
        statuses = {r["run_id"]: r["status"] for r in store.rows()}
        assert statuses == {dead_run: "interrupted", live_run: "running"}
    finally:
        live.kill()
        live.wait()


def test_baselines_are_kept_per_model_gpu_and_torch_and_fill_a_compile_time_the_job_did_not_measure(store, job):
    run = store.start_run({}, {})
    bench = {"environment": {"gpu": "H100", "torch": "2.11"},
             "variants": {"eager": {"status": "ok", "median_ms": 2.0, "peak_bytes": 1},
                          "compile": {"status": "ok", "median_ms": 1.5, "peak_bytes": 2},
                          "candidate": {"status": "ok", "median_ms": 1.0, "peak_bytes": 3}}}
    measured = Outcome("done", "correct", bench=bench, environment={"gpu": "H100", "torch": "2.11"},
                       metrics={"ours_ms": 1.0, "compile_ms": 1.5})
    store.finish_job(store.start_job(run, job, 1, "gpu0"), job, measured)
    assert {b["variant"] for b in store.rows("baselines")} == {"eager", "compile"}  # never the candidate
    assert store.cached(job.model_hash) == {("H100", "2.11")}
    assert store.baseline(job.model_hash, "H200", "2.11", "compile") is None
    untimed = Outcome("done", "correct", environment={"gpu": "H100", "torch": "2.11"}, metrics={"ours_ms": 0.5})
    row = store.start_job(run, job, 1, "gpu1")
    store.finish_job(row, job, untimed)
    filled = next(r for r in store.rows() if r["id"] == row)
    assert (filled["compile_ms"], filled["speedup_vs_compile"], filled["compile_cached"]) == (1.5, 3.0, 1)


def test_the_commit_is_read_from_git_unless_fuseforge_commit_names_it(monkeypatch):
    from fuseforge.suite import environment

    environment.commit.cache_clear()
    monkeypatch.delenv("FUSEFORGE_COMMIT", raising=False)
    from_git = environment.commit()
    assert from_git is None or len(from_git.removesuffix("+dirty")) == 12
    environment.commit.cache_clear()
    monkeypatch.setenv("FUSEFORGE_COMMIT", "1482e1c")
    assert environment.commit() == "1482e1c"
    environment.commit.cache_clear()
