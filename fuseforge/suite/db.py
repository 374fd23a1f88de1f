"""The suite's SQLite file: one row per invocation, one row per job attempt, cached baselines.

WAL journal, synchronous=NORMAL, one transaction per write: a row is committed as soon as its job starts
("running") and again when it ends, so killing the suite at any moment loses at most the jobs in flight.

Schema (version SCHEMA_VERSION, in table `schema_version`):

runs        one row per `fuseforge suite` invocation
    id, started, finished (UTC ISO 8601; finished NULL if the run was killed), host, pid,
    args (JSON: the SuiteConfig), environment (JSON: host, python, torch, commit, gpus [{id, name, driver}])
jobs        one row per model x candidate x run that executed (skipped jobs add no row)
    id, run_id, job_key (model hash + candidate hash + settings), kind ("optimize" | "check"),
    model, model_name, model_hash, candidate, candidate_hash ("" for optimize), settings (JSON),
    status ("running" | "done" | "failed" | "interrupted" | "unavailable"), verdict, reason, phase
    ("build" | "run": where it ended), exit_code, attempt (1, 2, ...), worker ("gpu<id>", "cpu", "ray:..."),
    started, finished, build_s, run_s, out_dir,
    gpu, torch, commit_sha, environment (JSON: host, python, driver, cuda_visible_devices, measured: the
        evaluator's own record),
    cand_rel_err, eager_rel_err (worst output vs fp64), allclose (0/1: KernelBench column),
    ours_ms, eager_ms, compile_ms (medians), eager_cached, compile_cached (1: that median is a cached
    baseline, not timed by this job), ours_peak_bytes, eager_peak_bytes, compile_peak_bytes,
    speedup_vs_eager, speedup_vs_compile, flops, min_bytes, floor_ms (roofline), gpu_s (seconds the job held
    its GPU: its GPU lease, or its whole run phase), lease_wait_s (seconds its run phase waited for the
    lease), verify_json (50_verify.json without its cases), bench_json (60_bench.json), roofline_json
    (suite_roofline.json)
baselines   timings of the reference variants, one per model hash x GPU name x torch version x bench
    settings x variant ("eager", "compile", "compile_max_autotune" with `suite --max-autotune`, whatever the
    evaluator times): settings (canonical JSON of fuseforge/evaluate/baselines.py's key; "{}" where the job
    did not say), median_ms, p10_ms, p90_ms, min_ms, mean_ms, trials, peak_bytes, peak_abs_bytes, job_id
    (the job that measured it), measured (UTC time), source. The run phase of a job gets this model's rows
    as the evaluator's baseline cache (FUSEFORGE_BASELINES), and the baselines it measured come back here.

Version 1 files (no settings, no eager_cached, gpu_s, lease_wait_s) are migrated when a suite opens them;
`fuseforge report` reads them as they are (Store(path, readonly=True)).

Resume: a job is skipped when a row with its job_key is "done", or when max_attempts of its rows are
"failed"; rows "running" from a run whose process is gone become "interrupted" and are retried (an
interruption is not the job's failure). One suite process per database at a time: a second one would
retry the first one's jobs in flight.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path

from fuseforge.evaluate import baselines as baseline_cache

from .execute import Outcome
from .jobs import Job

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
METRICS = ("cand_rel_err", "eager_rel_err", "allclose", "ours_ms", "eager_ms", "compile_ms", "ours_peak_bytes",
           "eager_peak_bytes", "compile_peak_bytes", "speedup_vs_eager", "speedup_vs_compile", "flops",
           "min_bytes", "floor_ms")
INTEGERS = {"allclose", "ours_peak_bytes", "eager_peak_bytes", "compile_peak_bytes"}
JOBS_V2 = (("eager_cached", "INTEGER NOT NULL DEFAULT 0"), ("gpu_s", "REAL"), ("lease_wait_s", "REAL"))
BASELINES_TABLE = """CREATE TABLE {name} (
    model_hash TEXT NOT NULL, gpu TEXT NOT NULL, torch TEXT NOT NULL, settings TEXT NOT NULL, variant TEXT NOT NULL,
    median_ms REAL NOT NULL, p10_ms REAL, p90_ms REAL, min_ms REAL, mean_ms REAL, trials INTEGER, peak_bytes INTEGER,
    peak_abs_bytes INTEGER, job_id INTEGER REFERENCES jobs(id), measured TEXT NOT NULL, source TEXT,
    PRIMARY KEY (model_hash, gpu, torch, settings, variant))"""
BASELINE_COLUMNS = ("model_hash", "gpu", "torch", "settings", "variant", "median_ms", "p10_ms", "p90_ms", "min_ms",
                    "mean_ms", "trials", "peak_bytes", "peak_abs_bytes", "job_id", "measured", "source")
LEGACY_SETTINGS = "{}"  # version 1 rows and jobs that do not say their bench settings
SCHEMA = f"""
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, started TEXT NOT NULL, finished TEXT, host TEXT NOT NULL,
    pid INTEGER NOT NULL, args TEXT NOT NULL, environment TEXT NOT NULL);
CREATE TABLE jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id INTEGER NOT NULL REFERENCES runs(id),
    job_key TEXT NOT NULL, kind TEXT NOT NULL, model TEXT NOT NULL, model_name TEXT NOT NULL,
    model_hash TEXT NOT NULL, candidate TEXT, candidate_hash TEXT NOT NULL, settings TEXT NOT NULL,
    status TEXT NOT NULL, verdict TEXT, reason TEXT, phase TEXT, exit_code INTEGER,
    attempt INTEGER NOT NULL, worker TEXT, started TEXT NOT NULL, finished TEXT, build_s REAL, run_s REAL,
    out_dir TEXT NOT NULL, gpu TEXT, torch TEXT, commit_sha TEXT, environment TEXT,
    {", ".join(f"{m} {'INTEGER' if m in INTEGERS else 'REAL'}" for m in METRICS)}, compile_cached INTEGER NOT NULL DEFAULT 0,
    verify_json TEXT, bench_json TEXT, roofline_json TEXT, {", ".join(f"{c} {t}" for c, t in JOBS_V2)});
CREATE INDEX jobs_by_key ON jobs (job_key, status);
{BASELINES_TABLE.format(name="baselines")};
"""


class SchemaError(Exception):
    """The file is not a suite database of this version."""


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _json(value) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, default=str)


def _alive(host: str, pid: int) -> bool:
    if host != socket.gethostname():
        return False  # another host's run: its jobs cannot be checked, and resuming it here is the intent
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid != os.getpid()


def _settings_json(settings: dict | None) -> str:
    return json.dumps(baseline_cache.canonical_settings(settings), sort_keys=True) if settings else LEGACY_SETTINGS


class Store:
    """The database, shared by the scheduler's threads (one connection, one lock). `readonly`: read a file of
    any readable version as it is (no migration), as `fuseforge report` does."""

    def __init__(self, path: Path, readonly: bool = False):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self.conn.row_factory = sqlite3.Row
        self.lock = threading.Lock()
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("PRAGMA foreign_keys=ON")
        tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not tables:
            with self.conn:
                self.conn.execute("BEGIN")
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        self.conn.execute(statement)
                self.conn.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
        elif "schema_version" not in tables:
            raise SchemaError(f"{path} is an SQLite file but not a fuseforge suite database")
        version = self.conn.execute("SELECT version FROM schema_version").fetchone()[0]
        if version not in READABLE_VERSIONS:
            raise SchemaError(f"{path} has schema version {version}; this fuseforge reads "
                              f"{', '.join(map(str, READABLE_VERSIONS))}")
        if version != SCHEMA_VERSION and not readonly:
            self._migrate_from_1()
        self.version = SCHEMA_VERSION if not readonly else version

    def _migrate_from_1(self) -> None:
        """Version 1 -> 2: the jobs' new columns; baselines keyed by bench settings too (old rows: "{}")."""
        with self.lock, self.conn:
            self.conn.execute("BEGIN")
            for column, kind in JOBS_V2:
                self.conn.execute(f"ALTER TABLE jobs ADD COLUMN {column} {kind}")
            self.conn.execute(BASELINES_TABLE.format(name="baselines_v2"))
            self.conn.execute("INSERT INTO baselines_v2 (model_hash, gpu, torch, settings, variant, median_ms, p10_ms, "
                              "p90_ms, peak_bytes, job_id, measured) SELECT model_hash, gpu, torch, ?, variant, "
                              "median_ms, p10_ms, p90_ms, peak_bytes, job_id, measured FROM baselines",
                              (LEGACY_SETTINGS,))
            self.conn.execute("DROP TABLE baselines")
            self.conn.execute("ALTER TABLE baselines_v2 RENAME TO baselines")
            self.conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))

    def close(self) -> None:
        self.conn.close()

    def _write(self, sql: str, params=()) -> int:
        with self.lock, self.conn:
            return self.conn.execute(sql, params).lastrowid

    def start_run(self, args: dict, environment: dict) -> int:
        return self._write("INSERT INTO runs (started, host, pid, args, environment) VALUES (?, ?, ?, ?, ?)",
                           (now(), socket.gethostname(), os.getpid(), _json(args), _json(environment)))

    def finish_run(self, run_id: int) -> None:
        self._write("UPDATE runs SET finished = ? WHERE id = ?", (now(), run_id))

    def recover_interrupted(self) -> int:
        """Rows left "running" by runs whose process is gone become "interrupted"; returns how many."""
        with self.lock:
            rows = self.conn.execute("SELECT DISTINCT r.id, r.host, r.pid FROM jobs j JOIN runs r ON j.run_id = r.id "
                                     "WHERE j.status = 'running'").fetchall()
        dead = [r["id"] for r in rows if not _alive(r["host"], r["pid"])]
        count = 0
        for run_id in dead:
            with self.lock, self.conn:
                count += self.conn.execute(
                    "UPDATE jobs SET status = 'interrupted', reason = 'the suite stopped while this job ran', "
                    "finished = ? WHERE run_id = ? AND status = 'running'", (now(), run_id)).rowcount
        return count

    def interrupt_running(self, run_id: int) -> None:
        """This run is stopping: its unfinished rows become "interrupted" (retried next time)."""
        self._write("UPDATE jobs SET status = 'interrupted', reason = 'the suite was stopped while this job ran', "
                    "finished = ? WHERE run_id = ? AND status = 'running'", (now(), run_id))

    def history(self, job_key: str) -> tuple[bool, int, int]:
        """(done already, failed attempts, attempts) of a job: "unavailable" rows are no attempt, and
        "interrupted" ones (the suite was stopped, not the job's fault) no failure."""
        with self.lock:
            rows = self.conn.execute("SELECT status FROM jobs WHERE job_key = ?", (job_key,)).fetchall()
        statuses = [r["status"] for r in rows]
        return "done" in statuses, statuses.count("failed"), sum(s != "unavailable" for s in statuses)

    def start_job(self, run_id: int, job: Job, attempt: int, worker: str, status: str = "running") -> int:
        return self._write(
            "INSERT INTO jobs (run_id, job_key, kind, model, model_name, model_hash, candidate, candidate_hash, "
            "settings, status, attempt, worker, started, out_dir) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, job.key, job.kind, str(job.model), job.model.stem, job.model_hash,
             str(job.candidate) if job.candidate else None, job.candidate_hash, job.settings, status, attempt,
             worker, now(), str(job.out_dir)))

    def finish_job(self, row_id: int, job: Job, outcome: Outcome) -> None:
        """Store the outcome and the baselines it measured; fill compile_ms from the cache if not timed."""
        env = outcome.environment
        values = {"status": outcome.status, "verdict": outcome.verdict, "reason": outcome.reason,
                  "phase": outcome.phase, "exit_code": outcome.exit_code, "worker": outcome.worker,
                  "finished": now(), "build_s": outcome.build_s, "run_s": outcome.run_s,
                  "gpu": env.get("gpu"), "torch": env.get("torch"), "commit_sha": env.get("commit"),
                  "environment": _json(env or None), "verify_json": _json(outcome.verify),
                  "bench_json": _json(outcome.bench), "roofline_json": _json(outcome.roofline),
                  "eager_cached": outcome.metrics.get("eager_cached") or 0,
                  "compile_cached": outcome.metrics.get("compile_cached") or 0,
                  "gpu_s": outcome.gpu_s, "lease_wait_s": outcome.lease_wait_s,
                  **{m: outcome.metrics.get(m) for m in METRICS}}
        self._record_baselines(row_id, job, outcome)
        cached = self.baseline(job.model_hash, values["gpu"], values["torch"], "compile")
        if values["compile_ms"] is None and values["ours_ms"] and cached:
            values.update(compile_ms=cached["median_ms"], compile_peak_bytes=cached["peak_bytes"],
                          speedup_vs_compile=cached["median_ms"] / values["ours_ms"], compile_cached=1)
        names = ", ".join(f"{k} = ?" for k in values)
        self._write(f"UPDATE jobs SET {names} WHERE id = ?", (*values.values(), row_id))

    def _record_baselines(self, row_id: int, job: Job, outcome: Outcome) -> None:
        """The reference variants the job timed (not those it took from the cache), under the evaluator's own
        key when the bench record gives it; and the entries its run phase added to the baseline cache."""
        bench = outcome.bench or {}
        env = bench.get("environment") or {}
        key = (bench.get("baselines") or {}).get("key") or {}
        gpu = key.get("gpu") or env.get("gpu") or outcome.environment.get("gpu")
        torch = key.get("torch") or env.get("torch") or outcome.environment.get("torch")
        settings = key.get("settings")
        rows = []
        if gpu and torch:
            for variant, v in (bench.get("variants") or {}).items():
                if (variant == "candidate" or not isinstance(v, dict) or v.get("status") != "ok"
                        or v.get("median_ms") is None or v.get("cached")):
                    continue
                rows.append({"model_hash": job.model_hash, "gpu": gpu, "torch": torch, "settings": settings,
                             "variant": variant, **{k: v.get(k) for k in baseline_cache.NUMBERS},
                             "measured": now(), "source": f"job {row_id}"})
        for entry in outcome.new_baselines:
            if entry.get("model_hash") == job.model_hash and isinstance(entry.get("median_ms"), (int, float)):
                rows.append({**entry, "source": f"job {row_id}: {entry.get('source') or ''}".rstrip(": ")})
        for r in rows:
            self._write(f"INSERT OR REPLACE INTO baselines ({', '.join(BASELINE_COLUMNS)}) VALUES "
                        f"({', '.join('?' * len(BASELINE_COLUMNS))})",
                        (r["model_hash"], r["gpu"], r["torch"], _settings_json(r.get("settings")), r["variant"],
                         r.get("median_ms"), r.get("p10_ms"), r.get("p90_ms"), r.get("min_ms"), r.get("mean_ms"),
                         r.get("trials"), r.get("peak_bytes"), r.get("peak_abs_bytes"), row_id,
                         r.get("measured") or now(), r.get("source")))

    def baseline(self, model_hash: str, gpu: str | None, torch: str | None, variant: str) -> dict | None:
        """The newest baseline of this model, GPU, torch version and variant, whatever its bench settings."""
        with self.lock:
            row = self.conn.execute("SELECT * FROM baselines WHERE model_hash = ? AND gpu = ? AND torch = ? "
                                    "AND variant = ? ORDER BY measured DESC", (model_hash, gpu, torch, variant)).fetchone()
        return dict(row) if row else None

    def baseline_entries(self, model_hash: str) -> list[dict]:
        """This model's baselines as entries of the evaluator's cache file (fuseforge/evaluate/baselines.py);
        rows that do not say their bench settings are left out (they match no key)."""
        with self.lock:
            rows = self.conn.execute("SELECT * FROM baselines WHERE model_hash = ? AND settings != ?",
                                     (model_hash, LEGACY_SETTINGS)).fetchall()
        entries = []
        for r in map(dict, rows):
            entries.append({**baseline_cache.make_key(r["model_hash"], r["gpu"], r["torch"], json.loads(r["settings"])),
                            "variant": r["variant"], **{k: r.get(k) for k in baseline_cache.NUMBERS},
                            "measured": r["measured"], "source": f"suite database: {r.get('source') or ''}".rstrip(": ")})
        return entries

    def cached(self, model_hash: str, variant: str = "compile") -> set[tuple[str, str]]:
        """The (GPU name, torch version) pairs with a cached baseline of this variant for this model."""
        with self.lock:
            rows = self.conn.execute("SELECT gpu, torch FROM baselines WHERE model_hash = ? AND variant = ?",
                                     (model_hash, variant)).fetchall()
        return {(r["gpu"], r["torch"]) for r in rows}

    def rows(self, table: str = "jobs") -> list[dict]:
        assert table in ("runs", "jobs", "baselines")
        with self.lock:
            return [dict(r) for r in self.conn.execute(f"SELECT * FROM {table} ORDER BY rowid")]
