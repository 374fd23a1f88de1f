"""On a GPU: the three seed models come out verified, with a benchmark, a report and model_new.py."""

import json

import pytest
from conftest import SEED_MODELS

from fuseforge.config import OptimizeConfig
from fuseforge.pipeline import optimize


@pytest.mark.gpu
@pytest.mark.parametrize("model", SEED_MODELS, ids=[p.stem for p in SEED_MODELS])
def test_a_seed_model_is_optimized_into_a_verified_model_new(model, tmp_path):
    run = optimize(OptimizeConfig(model_path=model, out_dir=tmp_path, trials=10, compile_baseline=False))
    assert run.verified, run.verify
    assert (tmp_path / "model_new.py").exists()
    verify = json.loads((tmp_path / "50_verify.json").read_text())
    assert len(verify["cases"]) >= 6  # 3 seeds x 2 input distributions (+ another batch size)
    assert all(case["passed"] is not False for case in verify["cases"])
    bench = json.loads((tmp_path / "60_bench.json").read_text())
    assert bench["variants"]["candidate"]["median_ms"] > 0
    assert "## Measured on the GPU" in (tmp_path / "report.md").read_text()
