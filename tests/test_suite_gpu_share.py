"""How the suite shares a GPU and the CPUs (fake jobs, no GPU): two run phases in flight per GPU, one GPU
lease, GPU seconds per job, a timeout that does not count the wait for the lease, CPUs kept for timing,
and the baselines a job measured coming back as the next job's cache."""

import io
import json
import sqlite3
from pathlib import Path

import pytest
from rich.console import Console

from fuseforge.suite import environment, scheduler
from fuseforge.suite.db import SCHEMA_VERSION, Store
from fuseforge.suite.fake_job import BUILD_COMMAND, CHECK_RUN_COMMAND, RUN_COMMAND, write_model
from fuseforge.suite.jobs import SuiteConfig
from fuseforge.suite.report import job_table, totals
from fuseforge.suite.scheduler import run_suite

FAKE = {"build_command": BUILD_COMMAND, "run_command": RUN_COMMAND}
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def own_lease_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEFORGE_LEASE_DIR", str(tmp_path / "leases"))


def _run(tmp_path, **kw) -> tuple[object, list[dict]]:
    config = SuiteConfig(**{"models": tmp_path / "models", "db": tmp_path / "r.sqlite", "gpus": 1, "jobs": 2,
                            **FAKE, **kw})
    result = run_suite(config, Console(file=io.StringIO(), width=120))
    store = Store(config.db)
    try:
        return result, store.rows()
    finally:
        store.close()


def _record(row: dict, phase: str = "run") -> dict:
    return json.loads((Path(row["out_dir"]) / f"fake_job_{phase}.json").read_text())


def test_two_run_phases_share_a_gpu_but_never_hold_it_at_the_same_time(tmp_path):
    for i in range(4):
        write_model(tmp_path / "models" / f"m{i}.py", sleep=0.6, gpu_sleep=0.4)
    result, rows = _run(tmp_path, run_slots=2)
    assert result.exit_code == 0 and {r["verdict"] for r in rows} == {"correct"}
    runs = [_record(r) for r in rows]
    spells = sorted((rec["gpu_start"], rec["gpu_end"]) for rec in runs)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spells, spells[1:]))  # one on the GPU at a time
    assert any(a["start"] < b["end"] and b["start"] < a["end"] for a in runs for b in runs if a is not b)  # overlap
    for row in rows:
        assert 0.3 < row["gpu_s"] < 5 and row["gpu_s"] < row["run_s"] and row["lease_wait_s"] is not None
    middle = sorted(r["gpu_s"] for r in rows)[1:3]
    assert totals(rows)["median_gpu_s"] == pytest.approx(sum(middle) / 2)


def test_with_one_slot_per_gpu_the_run_phases_take_turns_and_the_gpu_time_is_the_run_phase(tmp_path):
    for i in range(2):
        write_model(tmp_path / "models" / f"m{i}.py", sleep=0.3)
    _, rows = _run(tmp_path, run_slots=1)
    a, b = (_record(r) for r in rows)
    assert a["end"] <= b["start"] or b["end"] <= a["start"]
    for row in rows:  # the fake job takes the lease: its GPU time is the time it held it
        assert row["gpu_s"] <= row["run_s"]


def test_the_wait_for_the_gpu_lease_does_not_count_toward_the_run_timeout(tmp_path):
    write_model(tmp_path / "models" / "a.py", gpu_sleep=3.0)
    write_model(tmp_path / "models" / "b.py", gpu_sleep=3.0)
    _, rows = _run(tmp_path, run_slots=2, run_timeout_s=4.5)
    assert [r["verdict"] for r in rows] == ["correct", "correct"], [r["reason"] for r in rows]
    assert max(r["lease_wait_s"] for r in rows) > 1.0  # one waited for the other's 3 s on the GPU
    assert max(r["run_s"] for r in rows) > 4.5  # more than the timeout in all, part of it waiting


def test_a_job_that_holds_the_gpu_past_its_timeout_is_still_timed_out(tmp_path):
    write_model(tmp_path / "models" / "slow.py", gpu_sleep=30)
    _, [row] = _run(tmp_path, run_slots=2, run_timeout_s=1.5)
    assert (row["status"], row["verdict"]) == ("failed", "timeout") and row["run_s"] < 10


def test_two_run_slots_per_gpu_are_the_default_only_where_the_default_commands_take_the_lease(tmp_path):
    assert SuiteConfig(models=tmp_path).slots_per_gpu == 2  # optimize, default run command
    assert SuiteConfig(models=tmp_path, run_command="x {model}").slots_per_gpu == 1
    assert SuiteConfig(models=tmp_path, candidates=tmp_path).slots_per_gpu == 2  # fuseforge check: its workers
    assert SuiteConfig(models=tmp_path, candidates=tmp_path, run_command="x").slots_per_gpu == 1
    assert SuiteConfig(models=tmp_path, ray="local").slots_per_gpu == 1
    assert SuiteConfig(models=tmp_path, run_command="x", run_slots=3).slots_per_gpu == 3


def test_every_run_phase_on_a_gpu_is_told_its_lease_and_the_cpus_are_shared_out(tmp_path, monkeypatch):
    cpus = set(range(16))
    monkeypatch.setattr(environment.os, "sched_getaffinity", lambda pid: cpus, raising=False)
    monkeypatch.setattr(environment, "thread_siblings", lambda cpu: {cpu})  # no SMT (the next test has it)
    applied = {}
    monkeypatch.setattr("fuseforge.suite.execute._confine", lambda pid, c: applied.setdefault(pid, set(c)))
    write_model(tmp_path / "models" / "m.py")
    _, [row] = _run(tmp_path, gpus=2)
    rec = _record(row)
    assert rec["gpu_lease"] == str(tmp_path / "leases" / f"gpu{rec['cuda_visible_devices']}.lock")
    assert rec["timing_cpus"] in ("14", "15")  # the highest CPUs, one per GPU
    assert len(applied) == 2 and all(c == set(range(14)) for c in applied.values())  # build and run phases
    # two GPUs, one run phase each (these commands take no lease), share the 14 CPUs: 7 threads each (64 threads
    # per process on 64 cores, 8 processes at once, made each check's comparisons 20-60x slower than alone)
    assert rec["omp_num_threads"] == "7"


def test_the_cpu_plan_keeps_one_cpu_per_gpu_only_when_there_are_enough(monkeypatch):
    monkeypatch.setattr(environment.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setattr(environment, "thread_siblings", lambda cpu: {cpu})  # no SMT
    assert environment.cpu_plan(2) == ({0: 6, 1: 7}, set(range(6)))
    assert environment.cpu_plan(3) == ({}, None)
    assert environment.cpu_plan(0) == ({}, None)


def test_the_smt_siblings_of_a_kept_cpu_run_nothing_else_where_enough_cpus_are_left(monkeypatch):
    # 16 CPUs on 8 cores: CPU c shares its core with c + 8 (the numbering Linux gives two threads a core)
    monkeypatch.setattr(environment.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(environment, "thread_siblings", lambda cpu: {cpu % 8, cpu % 8 + 8})
    assert environment.cpu_plan(1) == ({0: 15}, set(range(15)) - {7})
    assert environment.cpu_plan(2) == ({0: 14, 1: 15}, set(range(14)) - {6, 7})
    # too few left without the siblings (3 per GPU at least): they stay in the background set
    assert environment.cpu_plan(4) == ({0: 12, 1: 13, 2: 14, 3: 15}, set(range(12)))


def test_thread_siblings_reads_sysfs_lists_and_falls_back_to_the_cpu_itself(monkeypatch, tmp_path):
    texts = {"0-1\n": {0, 1}, "3,11\n": {3, 11}, "2-3,10-11": {2, 3, 10, 11}, "garbage": {5}}
    for text, expected in texts.items():
        monkeypatch.setattr(environment.Path, "read_text", lambda self, text=text: text)
        cpu = min(expected) if text != "garbage" else 5
        assert environment.thread_siblings(cpu) == expected | {cpu}
    monkeypatch.undo()
    assert environment.thread_siblings(10**6) == {10**6}  # no such CPU: itself


def test_a_baseline_a_job_measured_is_the_next_jobs_cache_and_the_record_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(scheduler, "gpu_info", lambda gpu_id: {"name": "FakeGPU"})
    write_model(tmp_path / "models" / "gemm.py", speedup=2, eager_ms=3.0, compile_ms=2.0)
    (tmp_path / "cands").mkdir()
    for i in (1, 2):
        (tmp_path / "cands" / f"gemm.answer_{i}.py").write_text(f"class ModelNew:  # {i}\n    pass\n")
    _, rows = _run(tmp_path, candidates=tmp_path / "cands", run_command=CHECK_RUN_COMMAND, jobs=1)
    first, second = sorted(rows, key=lambda r: r["id"])
    assert (first["eager_cached"], second["eager_cached"]) == (0, 1)
    assert second["eager_ms"] == first["eager_ms"] == 3.0 and second["speedup_vs_eager"] == pytest.approx(2.0)
    bench = json.loads(second["bench_json"])
    assert bench["variants"]["eager"]["cached_from"]["source"].startswith("suite database: job ")
    store = Store(tmp_path / "r.sqlite")
    baselines = store.rows("baselines")
    store.close()
    eager = [b for b in baselines if b["variant"] == "eager"]
    assert len(eager) == 1 and eager[0]["job_id"] == first["id"] and json.loads(eager[0]["settings"])["timer"] == "fake"
    headers, cells = job_table(rows)
    eager_column = headers.index("eager ms")
    assert sorted(c[eager_column] for c in cells) == ["3.000", "3.000 (cached)"]


def test_a_version_1_database_is_migrated_by_a_suite_and_read_as_it_is_by_the_report(tmp_path):
    [old] = sorted((REPO / "bench" / "results").glob("2026-11-22_suite_default_h100_*/results.sqlite"))[:1]
    copy = tmp_path / "old.sqlite"
    copy.write_bytes(old.read_bytes())
    before = copy.read_bytes()
    reader = Store(copy, readonly=True)
    rows = reader.rows()
    reader.close()
    assert rows and "gpu_s" not in rows[0] and copy.read_bytes() == before
    assert totals(rows)["median_gpu_s"] is None
    store = Store(copy)
    jobs, baselines = store.rows(), store.rows("baselines")
    store.close()
    assert {"eager_cached", "gpu_s", "lease_wait_s"} <= set(jobs[0]) and len(jobs) == len(rows)
    assert baselines and {b["settings"] for b in baselines} == {"{}"}
    with sqlite3.connect(copy) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION == 2


@pytest.mark.gpu
@pytest.mark.timeout(1500)
def test_on_a_gpu_jobs_hold_the_gpu_only_to_evaluate_and_a_second_run_takes_their_baselines(tmp_path):
    from conftest import PROBLEMS

    (tmp_path / "models").mkdir()
    for name in ("gemm_gelu_tanh", "conv2d_batchnorm_relu", "rmsnorm_residual"):
        (tmp_path / "models" / f"{name}.py").write_text((PROBLEMS / "dev" / f"{name}.py").read_text())
    first = SuiteConfig(models=tmp_path / "models", db=tmp_path / "r.sqlite", gpus=1)
    assert first.slots_per_gpu == 2
    run_suite(first, Console(file=io.StringIO(), width=160))
    # the same models again as other jobs (another plan), with every baseline in the database
    run_suite(SuiteConfig(models=tmp_path / "models", db=tmp_path / "r.sqlite", gpus=1,
                          kernel_flags=("--no-rows",)), Console(file=io.StringIO(), width=160))
    store = Store(tmp_path / "r.sqlite")
    rows, baselines = store.rows(), store.rows("baselines")
    store.close()
    assert len(rows) == 6 and {r["verdict"] for r in rows} == {"correct"}, [(r["model_name"], r["reason"]) for r in rows]
    for r in rows:
        assert 0 < r["gpu_s"] < r["run_s"] and r["lease_wait_s"] is not None
        lease_log = Path(r["out_dir"]).with_name(Path(r["out_dir"]).name + ".suite") / "gpu_lease.jsonl"
        assert '"acquired"' in lease_log.read_text()
    second = [r for r in rows if r["run_id"] == 2]
    assert all(r["eager_cached"] == 1 and r["compile_cached"] == 1 for r in second)
    assert {(b["variant"], json.loads(b["settings"])["timer"]) for b in baselines} == {
        ("eager", "cuda_events"), ("compile", "cuda_events")}
    print("GPU seconds per job:", sorted((r["run_id"], r["model_name"], r["gpu_s"], r["run_s"]) for r in rows))


def test_a_lease_held_by_a_process_outside_the_suite_does_not_keep_a_job_waiting_forever(tmp_path):
    import fcntl

    write_model(tmp_path / "models" / "m.py")
    (tmp_path / "leases").mkdir()
    with (tmp_path / "leases" / "gpu0.lock").open("a") as squatter:
        fcntl.flock(squatter, fcntl.LOCK_EX)  # held by this test process, never given back
        _, [row] = _run(tmp_path, run_slots=2, run_timeout_s=1.0)
    assert (row["status"], row["verdict"]) == ("failed", "timeout")
    assert 1.5 < row["run_s"] < 15  # the wait counted once past the timeout itself
