"""The opt-in third baseline of fuseforge check: torch.compile(mode="max-autotune"), timed in the reference's
process like the default compile, skipped with a reason when off or not on CUDA; the option, the judge's
speedup, the summary line; on a GPU, an "ok" median."""

from pathlib import Path

import pytest
import torch
import typer
from typer.testing import CliRunner

from fuseforge.check import judge, orchestrate, report
from fuseforge.check.cli import register
from fuseforge.check.orchestrate import CheckSettings, check_files

ADVERSARIAL = Path(__file__).parent / "adversarial"
MODEL = ADVERSARIAL / "models" / "linear_sigmoid.py"
HONEST = ADVERSARIAL / "honest_linear_sigmoid.py"


def _settings(**overrides) -> CheckSettings:
    base = {"device": "cpu", "seeds": 1, "trials": 2, "warmup": 1, "build_timeout_s": 120, "run_timeout_s": 120}
    return CheckSettings(**(base | overrides))


@pytest.mark.parametrize("requested, reason", [(True, "not on cuda"), (False, "off")])
def test_on_the_cpu_the_max_autotune_baseline_is_recorded_as_skipped_with_why(requested, reason):
    record = check_files(MODEL, HONEST, _settings(max_autotune=requested))
    assert record["verdict"] == "correct", record["reason"]
    assert record["settings"]["max_autotune"] is requested
    autotuned = record["timing"]["compile_max_autotune"]
    assert autotuned["status"] == "skipped" and autotuned["reason"].startswith(reason), autotuned
    assert record["timing"]["speedup"]["vs_compile_max_autotune"] is None
    assert record["timing"]["speedup"]["vs_eager"] is not None  # the other baselines are unchanged


def test_the_setting_is_off_by_default_and_part_of_the_reference_cache_key(tmp_path):
    assert CheckSettings().max_autotune is False
    model = tmp_path / "model.py"
    model.write_text(MODEL.read_text())
    off, on = (orchestrate._reference_key(model, _settings(max_autotune=v)) for v in (False, True))
    assert off != on


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """A host app, as fuseforge/cli.py is."""

    register(app)
    return app


@pytest.mark.parametrize("args, expected", [(["--max-autotune"], True), ([], False)])
def test_the_max_autotune_option_reaches_check_settings(monkeypatch, args, expected):
    seen = []

    def fake_check_files(model, candidate, settings, gate=None, progress=None):
        seen.append(settings)
        return {"verdict": "correct", "candidate": str(candidate), "model": str(model), "device": "cpu",
                "wall_s": 0.0}

    monkeypatch.setattr(orchestrate, "check_files", fake_check_files)
    result = CliRunner().invoke(_app(), ["check", str(MODEL), str(HONEST), "--device", "cpu", *args])
    assert result.exit_code == 0, result.output
    assert len(seen) == 1 and seen[0].max_autotune is expected


def test_the_help_of_max_autotune_says_it_adds_minutes_and_is_off_by_default():
    result = CliRunner().invoke(_app(), ["check", "--help"])
    text = " ".join(result.output.replace("│", " ").split())  # rich's box, wrapped
    assert "--max-autotune" in text and "minutes per model" in text and "off by default" in text


def _facts(ms: float) -> dict:
    return {"timing": {"ms": [ms] * 5, "wall_ms": [ms + 0.1] * 5, "timer": "cuda_events"}}


def _baseline(ms: float) -> dict:
    return {"median_ms": ms, "p10_ms": ms, "p90_ms": ms, "min_ms": ms, "mean_ms": ms, "trials": 5,
            "status": "ok", "reason": None}


def test_the_judge_computes_the_speedup_vs_max_autotune_from_the_references_median():
    meta = {"pool_size": 2, "timing": {"eager": _baseline(4.0), "compile": _baseline(2.0),
                                       "compile_max_autotune": _baseline(1.5), "timer": "cuda_events",
                                       "l2_flush_bytes": 1024, "pool_size": 2}}
    timing = judge._timing(_facts(0.5), meta)
    assert timing["compile_max_autotune"]["median_ms"] == 1.5
    assert timing["speedup"] == pytest.approx({"vs_eager": 8.0, "vs_compile": 4.0, "vs_compile_max_autotune": 3.0})


@pytest.mark.parametrize("baseline", [{"status": "skipped", "reason": "not on cuda"},
                                      {"status": "error", "reason": "InductorError: no"}, None])
def test_without_a_max_autotune_median_its_speedup_is_none_and_the_others_stay(baseline):
    meta = {"pool_size": 2, "timing": {"eager": _baseline(4.0), "compile": _baseline(2.0), "timer": "cuda_events",
                                       "l2_flush_bytes": 1024, "pool_size": 2}}
    if baseline is not None:
        meta["timing"]["compile_max_autotune"] = baseline
    timing = judge._timing(_facts(1.0), meta)
    assert timing["compile_max_autotune"] == baseline
    assert timing["speedup"] == {"vs_eager": 4.0, "vs_compile": 2.0, "vs_compile_max_autotune": None}


def _record(timing: dict) -> dict:
    return {"verdict": "correct", "candidate": "c.py", "model": "m.py", "device": "cuda", "timing": timing,
            "wall_s": 1.0}


def test_the_summary_prints_the_max_autotune_baseline_only_when_it_has_a_speedup():
    meta = {"pool_size": 2, "timing": {"eager": _baseline(4.0), "compile": _baseline(2.0),
                                       "compile_max_autotune": _baseline(1.5), "timer": "cuda_events"}}
    line = next(x for x in report.summary(_record(judge._timing(_facts(0.5), meta))) if "time:" in x)
    assert "torch.compile max-autotune 1.5 ms -> 3.00x" in line and "torch.compile 2 ms -> 4.00x" in line
    meta["timing"]["compile_max_autotune"] = {"status": "skipped", "reason": "off (no --max-autotune)"}
    line = next(x for x in report.summary(_record(judge._timing(_facts(0.5), meta))) if "time:" in x)
    assert "max-autotune" not in line and "torch.compile 2 ms -> 4.00x" in line


@pytest.mark.gpu
def test_on_a_gpu_a_tiny_models_record_with_max_autotune_has_an_ok_median():
    settings = CheckSettings(device="cuda", seeds=1, trials=5, warmup=2, max_autotune=True,
                             build_timeout_s=600, run_timeout_s=600, reference_timeout_s=1200)
    record = check_files(MODEL, HONEST, settings)
    assert record["timing"], (record["verdict"], record["reason"])
    autotuned = record["timing"]["compile_max_autotune"]
    assert autotuned["status"] == "ok", autotuned
    assert autotuned["median_ms"] > 0 and autotuned["trials"] == 5
    assert record["timing"]["compile"]["status"] == "ok"
    assert record["timing"]["speedup"]["vs_compile_max_autotune"] > 0


def test_a_max_autotune_baseline_that_fails_is_recorded_as_an_error_without_failing_the_reference(monkeypatch):
    from fuseforge.check import reference_role

    seen = {}

    def failing_compile(model, **options):
        seen.update(options)
        raise RuntimeError("autotuning failed\nsecond line")

    monkeypatch.setattr(reference_role.torch, "compile", failing_compile)
    job = {"max_autotune": True, "warmup": 1, "trials": 1}
    cuda = torch.device("cuda")  # only its type is read before torch.compile raises
    result = reference_role._compiled_variant(torch.nn.Linear(2, 2), [], None, job, cuda, True, "off",
                                              mode="max-autotune")
    assert seen == {"mode": "max-autotune"}
    assert result["status"] == "error" and "autotuning failed" in result["reason"] and "\n" not in result["reason"]
