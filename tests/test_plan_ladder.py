"""The ladder of plans: a plan that fails a check is followed by one without the cause, not without everything;
every rung left is kept in OUT/attempts/ and named in the report; only a model that cannot load ends without
a ModelNew."""

from pathlib import Path

import pytest

from fuseforge import pipeline
from fuseforge.config import OptimizeConfig
from fuseforge.families import NAMES
from fuseforge.families.rows import table as row_table
from fuseforge.ladder import Failure, describe, next_rung
from fuseforge.pipeline import ATTEMPTS, StageFailed, optimize

LINEAR_RELU = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 1024)

    def forward(self, x):
        return torch.softmax(torch.relu(self.linear(x)), dim=-1) * 2.0


def get_inputs():
    return [torch.randn(2048, 64)]  # 16 x 8 tiles: a GEMM kernel by default, then a row kernel


def get_init_inputs():
    return []
"""


@pytest.fixture
def model(tmp_path) -> Path:
    path = tmp_path / "linear_relu.py"
    path.write_text(LINEAR_RELU)
    return path


def _config(model: Path, tmp_path: Path) -> OptimizeConfig:
    return OptimizeConfig(model_path=model, out_dir=tmp_path / "out", gpu=False)


def _codegen_fails_with_a_gemm_kernel(monkeypatch):
    from fuseforge import codegen

    source = codegen._source

    def failing(group, by_name):
        if group.kind == "gemm":
            raise RuntimeError("injected: the GEMM kernel does not build")
        return source(group, by_name)

    monkeypatch.setattr(codegen, "_source", failing)


def test_a_kernel_that_fails_to_generate_removes_its_family_only_and_keeps_the_first_attempt(
        model, tmp_path, monkeypatch):
    _codegen_fails_with_a_gemm_kernel(monkeypatch)
    out = tmp_path / "out"
    run = optimize(_config(model, tmp_path))
    assert run.config.families == set(NAMES) - {"gemm"}
    assert not any(g.kind == "gemm" for g in run.plan.groups) and any(g.kind == "rows" for g in run.plan.groups)
    assert run.cpu_check.passed and (out / "40_model_new.py").exists()
    first = out / ATTEMPTS / "1_every-kernel-family"
    assert "gemm kernel" in (first / "20_partition.txt").read_text()  # the failed plan, kept
    assert not (first / "40_model_new.py").exists()  # it failed before emitting
    report = (out / "report.md").read_text()
    assert "The plan with every kernel family failed at codegen (attributed to the gemm family)" in report
    assert "injected: the GEMM kernel does not build" in report and "1_every-kernel-family" in report


def test_a_family_whose_float64_reference_is_wrong_is_named_by_the_cpu_check_and_removed_alone(
        model, tmp_path, monkeypatch):
    reference = row_table.reference
    monkeypatch.setattr(row_table, "reference", lambda *a: reference(*a) * 1.01)  # a 1 % error in the row kernel
    out = tmp_path / "out"
    run = optimize(_config(model, tmp_path))
    assert run.config.families == set(NAMES) - {"rows"}
    assert any(g.kind == "gemm" for g in run.plan.groups) and not any(g.kind == "rows" for g in run.plan.groups)
    report = (out / "report.md").read_text()
    assert "failed at verify (attributed to the rows family)" in report
    assert "relative error 1.0e-02 vs the graph's own ops" in report  # the failing check's number


def test_without_a_failure_the_default_plan_is_kept_and_nothing_is_set_aside(model, tmp_path):
    run = optimize(_config(model, tmp_path))
    assert run.config.families == set(NAMES) and not run.ladder
    assert any(g.kind == "gemm" for g in run.plan.groups) and not (tmp_path / "out" / ATTEMPTS).exists()


def test_a_model_that_cannot_load_ends_the_run_without_a_second_rung(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text(LINEAR_RELU.replace("def get_inputs", "def get_inputs_misspelt"))
    with pytest.raises(StageFailed) as failed:
        optimize(OptimizeConfig(model_path=broken, out_dir=tmp_path / "out", gpu=False))
    assert failed.value.stage == "load" and not (tmp_path / "out" / ATTEMPTS).exists()


def test_when_every_generated_kernel_fails_the_ladder_ends_at_torch_calls_of_the_rewritten_graph(
        model, tmp_path, monkeypatch):
    from fuseforge import codegen

    monkeypatch.setattr(codegen, "_source", lambda *a: (_ for _ in ()).throw(RuntimeError("injected")))
    run = optimize(_config(model, tmp_path))
    assert not run.plan.groups and run.config.rewrites and run.cpu_check.passed
    left = sorted(p.name for p in (tmp_path / "out" / ATTEMPTS).iterdir())
    def folder(names):
        return "--".join(n.replace("_", "-") for n in NAMES if n in names)
    assert left == ["1_every-kernel-family", "2_kernel-families-" + folder(set(NAMES) - {"gemm"}),
                    "3_kernel-families-" + folder(set(NAMES) - {"gemm", "rows"})]  # then its pointwise kernel failed
    assert "extension = " not in (tmp_path / "out" / "40_model_new.py").read_text()


DATA_DEPENDENT = LINEAR_RELU.replace(
    "return torch.softmax(torch.relu(self.linear(x)), dim=-1) * 2.0",
    "y = self.linear(x)\n        if y.sum() > 0:  # data-dependent control flow: torch.export cannot capture it\n"
    "            return torch.relu(y)\n        return -y")


def test_a_model_that_cannot_be_captured_gets_a_model_new_running_its_own_forward(tmp_path):
    path = tmp_path / "branchy.py"
    path.write_text(DATA_DEPENDENT)
    run = optimize(OptimizeConfig(model_path=path, out_dir=tmp_path / "out", gpu=False))
    assert run.captured is None and run.cpu_check.passed and run.cpu_check.max_rel_error == 0.0
    emitted = (tmp_path / "out" / "40_model_new.py").read_text()
    assert "return super().forward(*args, **kwargs)" in emitted
    report = (tmp_path / "out" / "report.md").read_text()
    assert "failed at capture" in report and "runs the model's own forward" in report


def test_when_every_verified_plan_is_slower_than_eager_the_fastest_one_is_kept(model, tmp_path, monkeypatch):
    times = {"every kernel family": 3.0, "every kernel family, no layout changes": 2.9,
             "pointwise kernels only": 1.2, "torch calls of the rewritten graph": 1.5,
             "torch calls of the captured graph": 1.6, "the model's own forward": 1.4}

    def bench(run):
        run.bench = {"variants": {"eager": {"status": "ok", "median_ms": 1.0},
                                  "candidate": {"status": "ok", "median_ms": times[describe(run.config)]}}}

    for stages in ("STAGES", "MODEL_FORWARD_STAGES"):
        monkeypatch.setattr(pipeline, stages, [(n, bench if n == "bench" else f) for n, f in getattr(pipeline, stages)])
    run = optimize(_config(model, tmp_path))
    assert describe(run.config) == "pointwise kernels only"
    out = tmp_path / "out"
    assert "fused" in (out / "40_model_new.py").read_text()  # the kept rung's artefacts are back in OUT
    tried = sorted(p.name for p in (out / ATTEMPTS).iterdir())
    # no rewrite fired here: the rewritten graph's torch calls are eager's ops, skipped after a slower plan
    assert tried == ["1_every-kernel-family", "3_the-model-s-own-forward"]
    report = (out / "report.md").read_text()
    assert "No plan ran faster than eager" in report and "slower than eager's 1.000 ms" in report


def _bench_with_compile(monkeypatch, times: dict[str, float], compile_ms: float = 1.0, eager_ms: float = 5.0):
    """The bench stage times each plan by its rung's name, beside fixed eager and torch.compile times."""
    def bench(run):
        run.bench = {"variants": {"eager": {"status": "ok", "median_ms": eager_ms},
                                  "compile": {"status": "ok", "median_ms": compile_ms},
                                  "candidate": {"status": "ok", "median_ms": times[describe(run.config)]}}}

    for stages in ("STAGES", "MODEL_FORWARD_STAGES"):
        monkeypatch.setattr(pipeline, stages, [(n, bench if n == "bench" else f) for n, f in getattr(pipeline, stages)])


WITHOUT_GEMM = "kernel families " + ", ".join(n for n in NAMES if n != "gemm")


def test_a_plan_slower_than_compile_with_a_gemm_kernel_is_measured_against_cublas_and_the_faster_is_kept(
        model, tmp_path, monkeypatch):
    """Catches a GEMM kernel the cost model wrongly expected faster than cuBLAS being kept although the same plan
    with cuBLAS's call ran faster."""
    _bench_with_compile(monkeypatch, {"every kernel family": 1.5, WITHOUT_GEMM: 1.2})
    run = optimize(_config(model, tmp_path))
    assert describe(run.config) == WITHOUT_GEMM and not any(g.kind == "gemm" for g in run.plan.groups)
    out = tmp_path / "out"
    assert sorted(p.name for p in (out / ATTEMPTS).iterdir()) == ["1_every-kernel-family"]
    assert "gemm" in (out / ATTEMPTS / "1_every-kernel-family" / "20_partition.txt").read_text()
    assert "fused" in (out / "40_model_new.py").read_text()  # the kept plan's artefacts are in OUT
    report = (out / "report.md").read_text()
    assert f"The plan with every kernel family was slower than the plan with {WITHOUT_GEMM}" in report
    assert "1.500 ms is slower than torch.compile's 1.000 ms" in report


def test_when_the_library_plan_is_not_faster_the_first_plan_and_its_artefacts_stay(model, tmp_path, monkeypatch):
    _bench_with_compile(monkeypatch, {"every kernel family": 1.5, WITHOUT_GEMM: 1.7})
    run = optimize(_config(model, tmp_path))
    assert run.config.families == set(NAMES) and any(g.kind == "gemm" for g in run.plan.groups)
    out = tmp_path / "out"
    folder = "2_" + WITHOUT_GEMM.replace(", ", "--").replace(" ", "-").replace("_", "-")
    assert sorted(p.name for p in (out / ATTEMPTS).iterdir()) == [folder]
    assert "gemm" in (out / "20_partition.txt").read_text() and (out / "40_model_new.py").exists()
    report = (out / "report.md").read_text()
    assert f"The plan with {WITHOUT_GEMM} was slower than the plan with every kernel family" in report


def test_a_plan_faster_than_compile_or_without_matrix_kernels_or_asked_for_every_kernel_gets_no_second_opinion(
        model, tmp_path, monkeypatch):
    from dataclasses import replace

    _bench_with_compile(monkeypatch, {"every kernel family": 0.9, WITHOUT_GEMM: 0.5})
    assert optimize(_config(model, tmp_path)).config.families == set(NAMES)  # faster than compile: kept as it is
    assert not (tmp_path / "out" / ATTEMPTS).exists()
    _bench_with_compile(monkeypatch, {"every kernel family": 1.5, WITHOUT_GEMM: 0.5})
    run = optimize(replace(_config(model, tmp_path), every_kernel=True))
    assert run.config.families == set(NAMES) and not (tmp_path / "out" / ATTEMPTS).exists()
    no_gemm = optimize(replace(_config(model, tmp_path), families=frozenset(NAMES) - {"gemm"}))
    assert not any(g.kind == "gemm" for g in no_gemm.plan.groups) and not (tmp_path / "out" / ATTEMPTS).exists()


def test_a_second_plan_that_fails_verification_leaves_the_first_plan_kept(model, tmp_path, monkeypatch):
    _bench_with_compile(monkeypatch, {"every kernel family": 1.5, WITHOUT_GEMM: 1.2})
    verify = pipeline.stage_verify

    def failing(run):
        if "gemm" not in run.config.families:
            raise RuntimeError("injected: verification failed")
        verify(run)

    monkeypatch.setattr(pipeline, "STAGES", [(n, failing if n == "verify" else f) for n, f in pipeline.STAGES])
    run = optimize(_config(model, tmp_path))
    assert run.config.families == set(NAMES)
    report = (tmp_path / "out" / "report.md").read_text()
    assert f"The plan with {WITHOUT_GEMM} failed at verify" in report and "injected" in report


def _failure(**kw) -> Failure:
    return Failure("verify", "injected", **kw)


def test_each_rung_of_the_ladder_is_a_strict_simplification_of_the_one_before():
    rung = OptimizeConfig(model_path=Path("m.py"), out_dir=Path("o"))
    used = dict(used_families=frozenset(NAMES), used_layout=True, used_kernels=True, rewrites_fired=True)
    seen = [describe(rung)]
    switches = lambda c: c.families | {k for k in ("layout", "pointwise_kernels", "rewrites", "capture")  # noqa: E731
                                       if getattr(c, k)}
    while (following := next_rung(rung, _failure(**used))) is not None:
        assert switches(following) < switches(rung)
        seen.append(describe(following))
        rung = following
    assert seen == ["every kernel family", "every kernel family, no layout changes",
                    "kernel families gemm, rows, channel_reductions, conv, no layout changes",
                    "kernel families gemm, channel_reductions, conv, no layout changes",
                    "kernel families gemm, conv, no layout changes", "kernel family conv, no layout changes",
                    "pointwise kernels only, no layout changes", "torch calls of the rewritten graph",
                    "torch calls of the captured graph", "the model's own forward"]


def test_a_failure_naming_no_family_gives_up_one_of_several_families_at_a_time_keeping_the_matrix_ones_longest():
    """Catches a plan whose GPU verification failed (a norm's statistics at shifted inputs, say) falling straight to
    pointwise kernels only, losing the GEMM kernel that carried its speedup along with the family that failed."""
    from fuseforge.ladder import DROP_ORDER

    assert sorted(DROP_ORDER) == sorted(NAMES)  # every family has its place (a new one too)
    rung = OptimizeConfig(model_path=Path("m.py"), out_dir=Path("o"))
    failed = _failure(used_families=frozenset({"gemm", "channel_norms"}), used_kernels=True)
    following = next_rung(rung, failed)
    assert following.families == rung.families - {"channel_norms"}
    # that rung failing too, with the GEMM kernel alone in its plan: pointwise kernels only
    assert describe(next_rung(following, _failure(used_families=frozenset({"gemm"}), used_kernels=True))) == \
        "pointwise kernels only"
    # one family used: nothing to choose between
    assert describe(next_rung(rung, _failure(used_families=frozenset({"rows"}), used_kernels=True))) == \
        "pointwise kernels only"
    # a plan that verified but ran slower than eager is not a failure of one family
    slower = _failure(used_families=frozenset({"gemm", "channel_norms"}), used_kernels=True, verified=True)
    assert describe(next_rung(rung, slower)) == "pointwise kernels only"


def test_a_rung_that_would_not_change_the_failed_plan_is_skipped():
    rung = OptimizeConfig(model_path=Path("m.py"), out_dir=Path("o"))
    following = next_rung(rung, _failure(used_kernels=True))  # no family, no layout change in the plan
    assert describe(following) == "torch calls of the rewritten graph"
    assert describe(next_rung(rung, _failure(family="gemm"))) == \
        "kernel families " + ", ".join(n for n in NAMES if n != "gemm")
    assert describe(rung.without_family("rows").without_family("gemm").without_family("channel_norms")
                    .without_family("conv")) == "kernel family channel_reductions"


def test_the_command_line_shows_the_next_rung_and_exits_0_with_the_simpler_plan(model, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from fuseforge.cli import app

    _codegen_fails_with_a_gemm_kernel(monkeypatch)
    result = CliRunner().invoke(app, ["optimize", str(model), "-o", str(tmp_path / "out"), "--no-gpu"])
    assert result.exit_code == 0, result.output
    assert "next rung: kernel families rows, channel_norms," in result.output  # the console wraps the rest
    assert (tmp_path / "out" / "40_model_new.py").exists()




def test_a_report_that_cannot_be_rendered_never_costs_a_verified_plan_its_place(model, tmp_path, monkeypatch):
    from fuseforge import report

    monkeypatch.setattr(report, "render", lambda run: f"{None:.2e}")  # a None where a number was expected
    run = optimize(_config(model, tmp_path))
    assert run.config.families == set(NAMES) and not run.ladder  # the default plan is kept
    text = (tmp_path / "out" / "report.md").read_text()
    assert "could not be rendered (TypeError" in text and "plan: every kernel family" in text


def test_the_measured_summary_of_an_output_whose_truth_is_all_zeros_has_no_relative_error():
    from fuseforge.report_measured import _worst

    worst = {"case": "seed 0 / file", "name": "output", "cand_err": 0.0, "bound": 1e-7, "ratio": 0.0,
             "cand_rel_err": None, "ref_rel_err": None}
    assert _worst({"worst": worst}) == "— (eager fp32: —; 0% of the allowed error)"


def test_after_a_plan_slower_than_eager_the_ladder_skips_torch_calls_of_eagers_own_ops():
    """The captured graph as torch calls runs eager's ops (so does the rewritten one where the rewrites removed no
    work: a convolution's bias split off into an add even adds some): after a verified but slower plan, or one whose
    kernels did none of the model's work, they cannot win and only cost a verification; after a failed one they are
    still the next simpler plan."""
    pointwise_only = OptimizeConfig(model_path=Path("m.py"), out_dir=Path("o")).without_families().without("layout")
    slow = dict(used_kernels=True, verified=True)
    assert describe(next_rung(pointwise_only, _failure(**slow))) == "the model's own forward"
    assert describe(next_rung(pointwise_only, _failure(**slow, rewrites_fired=True))) == "the model's own forward"
    assert describe(next_rung(pointwise_only, _failure(**slow, rewrites_fired=True, rewrites_saved=True))) == \
        "torch calls of the rewritten graph"
    token = dict(used_kernels=True, rewrites_fired=True, token=True)
    assert describe(next_rung(pointwise_only, _failure(**token))) == "the model's own forward"
    assert describe(next_rung(pointwise_only, _failure(**token, rewrites_saved=True))) == \
        "torch calls of the rewritten graph"
    assert describe(next_rung(pointwise_only, _failure(used_kernels=True))) == "torch calls of the rewritten graph"
    rewritten = pointwise_only.without("pointwise_kernels")
    assert describe(next_rung(rewritten, _failure(rewrites_fired=True, verified=True))) == "the model's own forward"
    assert describe(next_rung(rewritten, _failure(rewrites_fired=True))) == "torch calls of the captured graph"


CONV_SOFTMAX = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose2d(2, 6, 3)

    def forward(self, x):
        return torch.log_softmax(self.conv(x).flatten(1), dim=1).sum(1, keepdim=True)


def get_inputs():
    return [torch.rand(2, 2, 5, 4)]


def get_init_inputs():
    return []
"""


def test_a_plan_whose_kernels_compute_only_what_the_rewrites_split_off_gives_way_to_torch_calls(tmp_path):
    """Without the row kernels, the one kernel left adds the convolution's bias (split off by a rewrite) while every
    op of the model stays a torch call: no answer to "replace its operators". The rewrites removed no work (they split
    the bias off into an add), so torch calls of the rewritten or captured graph would run at least eager's ops: the
    model's own forward is kept, and the report says why."""
    path = tmp_path / "conv_softmax.py"
    path.write_text(CONV_SOFTMAX)
    config = OptimizeConfig(model_path=path, out_dir=tmp_path / "out", gpu=False, families=frozenset(), layout=False)
    run = optimize(config)
    assert describe(run.config) == "the model's own forward" and len(run.ladder) == 1
    (note,) = [n for n in run.ladder if "failed at partition" in n]
    assert "every op of the model stays a torch call" in note and "fused_add" in note
    emitted = (tmp_path / "out" / "40_model_new.py").read_text()
    assert "load_inline(" not in emitted and "return super().forward(*args, **kwargs)" in emitted


def test_a_plan_whose_kernel_computes_an_op_of_the_model_is_kept(tmp_path):
    path = tmp_path / "conv_softmax_relu.py"
    path.write_text(CONV_SOFTMAX.replace("return torch.log_softmax(self.conv(x)", "return torch.log_softmax(torch.relu(self.conv(x))"))
    run = optimize(OptimizeConfig(model_path=path, out_dir=tmp_path / "out", gpu=False, families=frozenset(),
                                  layout=False))
    assert [g.kind for g in run.plan.groups] == ["pointwise"] and not run.ladder
