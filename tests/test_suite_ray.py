"""The suite on a local Ray cluster on the CPU, with two fake GPU resources and fake jobs."""

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from fuseforge.suite.db import Store
from fuseforge.suite.fake_job import BUILD_COMMAND, RUN_COMMAND, write_model
from fuseforge.suite.jobs import SuiteConfig
from fuseforge.suite.scheduler import run_suite

ray = pytest.importorskip("ray")


@pytest.fixture
def fake_gpu_cluster():
    try:
        ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    except Exception as exc:  # no room for a Ray instance here (sandbox, ports): nothing to test
        pytest.skip(f"ray cannot start here: {exc}")
    yield
    ray.shutdown()


def _record(row, phase):
    return json.loads((Path(row["out_dir"]) / f"fake_job_{phase}.json").read_text())


def test_ray_runs_each_job_on_one_fake_gpu_after_building_it_and_records_every_outcome(tmp_path, fake_gpu_cluster):
    for i in range(3):
        write_model(tmp_path / "models" / f"ok{i}.py", sleep=0.3, speedup=1.5)
    write_model(tmp_path / "models" / "crash.py", run="crash")
    write_model(tmp_path / "models" / "nobuild.py", build="fail")
    config = SuiteConfig(models=tmp_path / "models", db=tmp_path / "r.sqlite", ray="local",  # GPUs: the cluster's
                         build_command=BUILD_COMMAND, run_command=RUN_COMMAND)
    result = run_suite(config, Console(file=io.StringIO()))
    store = Store(config.db)
    rows = {r["model_name"]: r for r in store.rows()}
    store.close()
    assert {n: (r["status"], r["verdict"]) for n, r in rows.items()} == {
        "ok0": ("done", "correct"), "ok1": ("done", "correct"), "ok2": ("done", "correct"),
        "crash": ("failed", "error"), "nobuild": ("done", "build_failed")}
    assert result.exit_code == 1
    for name in ("ok0", "ok1", "ok2", "crash"):
        run = _record(rows[name], "run")
        assert run["cuda_visible_devices"] in ("0", "1")  # exactly one GPU, the one Ray granted
        assert rows[name]["worker"].startswith("ray:") and rows[name]["worker"].endswith(f"gpu{run['cuda_visible_devices']}")
        assert _record(rows[name], "build")["end"] <= run["start"]
    assert rows["ok0"]["speedup_vs_eager"] == pytest.approx(1.5)
