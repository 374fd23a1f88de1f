"""The baseline cache (fuseforge/evaluate/baselines.py) and the bench that reads and fills it."""

import hashlib
import json
import textwrap

import pytest

from fuseforge.evaluate import baselines
from fuseforge.evaluate.cli import main
from fuseforge.suite.jobs import file_hash

HEADER = "import torch\nimport torch.nn as nn\n\n"
MODEL = """
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.linear = nn.Linear(n, n)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.rand(8, 16)]


def get_init_inputs():
    return [16]
"""
CANDIDATE = """
class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.linear = nn.Linear(n, n)

    def forward(self, x):
        return torch.clamp(x @ self.linear.weight.t() + self.linear.bias, min=0)
"""
SETTINGS = {"trials": 3, "warmup": 1, "seed": 0, "distribution": "file", "l2_flush_bytes": 0,
            "timer": "perf_counter", "float32_matmul_precision": "highest", "cudnn_allow_tf32": True}


def _files(tmp_path):
    model, cand = tmp_path / "model.py", tmp_path / "candidate.py"
    model.write_text(HEADER + textwrap.dedent(MODEL))
    cand.write_text(HEADER + textwrap.dedent(CANDIDATE))
    return model, cand


def _bench(tmp_path, out: str, *extra: str) -> dict:
    model, cand = _files(tmp_path)
    assert main([str(model), str(cand), "--out", str(tmp_path / out), "--device", "cpu", "--seeds", "1",
                 "--trials", "3", "--warmup", "1", *extra]) == 0
    return json.loads((tmp_path / out / "60_bench.json").read_text())


def test_the_model_hash_is_the_suites_file_hash(tmp_path):
    model, _ = _files(tmp_path)
    assert baselines.model_hash(model) == file_hash(model) == hashlib.sha256(model.read_bytes()).hexdigest()[:16]


def test_only_an_entry_with_exactly_the_same_key_is_found():
    key = baselines.make_key("abc", "NVIDIA H100", "2.11.0", SETTINGS)
    entry = baselines.entry(key, "eager", {"median_ms": 1.5, "p10_ms": 1.4}, "test")
    assert baselines.lookup([entry], key, "eager")["median_ms"] == 1.5
    assert baselines.lookup([entry], key, "compile") is None
    for other in (baselines.make_key("abd", "NVIDIA H100", "2.11.0", SETTINGS),
                  baselines.make_key("abc", "NVIDIA H200", "2.11.0", SETTINGS),
                  baselines.make_key("abc", "NVIDIA H100", "2.13.0", SETTINGS),
                  baselines.make_key("abc", "NVIDIA H100", "2.11.0", {**SETTINGS, "trials": 50}),
                  baselines.make_key("abc", "NVIDIA H100", "2.11.0", {**SETTINGS, "cudnn_allow_tf32": False})):
        assert baselines.lookup([entry], other, "eager") is None, other


def test_a_cached_entry_becomes_a_variant_record_that_says_where_it_came_from():
    key = baselines.make_key("abc", None, "2.11.0", SETTINGS)
    record = baselines.as_variant(baselines.entry(key, "compile", {"median_ms": 2.0, "trials": 50}, "suite job 7"))
    assert record["status"] == "ok" and record["cached"] is True and record["median_ms"] == 2.0
    assert record["cached_from"]["source"] == "suite job 7" and record["cached_from"]["measured"]
    assert key["gpu"] == "cpu"


def test_a_cached_compile_baseline_keeps_its_deviation_from_eager_and_an_eager_one_gets_none():
    key = baselines.make_key("abc", None, "2.11.0", SETTINGS)
    measured = {"median_ms": 2.0, "deviation_from_eager": 1.2e-3, "eager_repeat_deviation": 0.0}
    compiled = baselines.as_variant(baselines.entry(key, "compile", measured, "job"))
    assert compiled["deviation_from_eager"] == 1.2e-3 and compiled["eager_repeat_deviation"] == 0.0
    eager = baselines.as_variant(baselines.entry(key, "eager", {"median_ms": 3.0}, "job"))
    assert not set(baselines.DEVIATIONS) & set(eager)


def test_adding_an_entry_replaces_the_one_of_the_same_key_and_keeps_the_others(tmp_path):
    path = tmp_path / "cache.json"
    k1 = baselines.make_key("a", "g", "t", SETTINGS)
    k2 = baselines.make_key("b", "g", "t", SETTINGS)
    baselines.add(path, [baselines.entry(k1, "eager", {"median_ms": 1.0}, "x"),
                         baselines.entry(k2, "eager", {"median_ms": 2.0}, "x")])
    baselines.add(path, [baselines.entry(k1, "eager", {"median_ms": 3.0}, "y")])
    entries = baselines.read(path)
    assert len(entries) == 2
    assert baselines.lookup(entries, k1, "eager")["median_ms"] == 3.0
    assert baselines.lookup(entries, k2, "eager")["median_ms"] == 2.0


def test_an_unreadable_cache_file_is_an_empty_cache(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "other.json").write_text(json.dumps({"schema": "something/else", "entries": [{}]}))
    assert baselines.read(tmp_path / "bad.json") == baselines.read(tmp_path / "other.json") == []
    assert baselines.read(tmp_path / "missing.json") == baselines.read(None) == []


def test_the_bench_stores_the_eager_baseline_then_reuses_it_and_says_so(tmp_path):
    cache = tmp_path / "cache.json"
    first = _bench(tmp_path, "out1", "--baselines", str(cache))
    assert first["variants"]["eager"].get("cached") is None
    assert first["baselines"]["stored"] == ["eager"] and first["baselines"]["cached"] == []
    [stored] = baselines.read(cache)
    assert stored["variant"] == "eager" and stored["median_ms"] == first["variants"]["eager"]["median_ms"]
    second = _bench(tmp_path, "out2", "--baselines", str(cache))
    eager = second["variants"]["eager"]
    assert eager["cached"] is True and eager["median_ms"] == first["variants"]["eager"]["median_ms"]
    assert eager["cached_from"]["measured"] == stored["measured"]
    assert second["baselines"]["cached"] == ["eager"] and second["baselines"]["stored"] == []
    assert second["variants"]["candidate"].get("cached") is None and second["variants"]["candidate"]["trials"] == 3
    assert second["speedup"]["vs_eager"] == pytest.approx(eager["median_ms"]
                                                          / second["variants"]["candidate"]["median_ms"])


def test_the_bench_reads_the_cache_named_by_the_environment(tmp_path, monkeypatch):
    cache = tmp_path / "env_cache.json"
    monkeypatch.setenv(baselines.ENV, str(cache))
    _bench(tmp_path, "out1")
    assert _bench(tmp_path, "out2")["variants"]["eager"]["cached"] is True


def test_other_bench_settings_do_not_take_a_cached_baseline(tmp_path):
    cache = tmp_path / "cache.json"
    _bench(tmp_path, "out1", "--baselines", str(cache))
    model, cand = _files(tmp_path)
    assert main([str(model), str(cand), "--out", str(tmp_path / "out2"), "--device", "cpu", "--seeds", "1",
                 "--trials", "4", "--warmup", "1", "--baselines", str(cache)]) == 0
    bench = json.loads((tmp_path / "out2" / "60_bench.json").read_text())
    assert bench["variants"]["eager"].get("cached") is None and bench["variants"]["eager"]["trials"] == 4
    assert len(baselines.read(cache)) == 2


def test_without_a_cache_every_variant_is_timed_and_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv(baselines.ENV, raising=False)
    bench = _bench(tmp_path, "out")
    assert bench["baselines"]["file"] is None and bench["baselines"]["stored"] == []
    assert bench["variants"]["eager"]["trials"] == 3 and "cached" not in bench["variants"]["eager"]
    assert set(bench["seconds"]) == {"build", "warmup", "timing", "peak"}


@pytest.mark.gpu
def test_on_cuda_cached_eager_and_compile_baselines_leave_only_the_candidate_to_time(tmp_path):
    cache = tmp_path / "cache.json"
    model, cand = _files(tmp_path)
    for out in ("out1", "out2"):
        assert main([str(model), str(cand), "--out", str(tmp_path / out), "--device", "cuda", "--seeds", "1",
                     "--trials", "5", "--baselines", str(cache)]) == 0
    first, second = (json.loads((tmp_path / o / "60_bench.json").read_text()) for o in ("out1", "out2"))
    assert sorted(first["baselines"]["stored"]) == ["compile", "eager"]
    assert sorted(second["baselines"]["cached"]) == ["compile", "eager"]
    assert second["baselines"]["key"]["gpu"].startswith("NVIDIA")
    for name in ("eager", "compile"):
        assert second["variants"][name]["median_ms"] == first["variants"][name]["median_ms"]
    assert second["seconds"]["warmup"] < first["seconds"]["warmup"]  # nothing compiled the second time
