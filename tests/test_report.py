"""report.md answers the seven questions of the seed requests for this model, concisely: what was replaced,
fused, changed algorithmically and left alone (and why), how the kernels are called, the expected speedup and
memory saving with their reasons; then the GPU's verdict and numbers, and the plan the ladder kept."""

import operator
import re
from pathlib import Path

import pytest
from conftest import REPO, SEED_MODELS

from fuseforge.config import OptimizeConfig
from fuseforge.cost import VIEW_OPS
from fuseforge.families import FAMILIES
from fuseforge.fuzz.reasons import plans_left
from fuseforge.ladder import describe
from fuseforge.pipeline import optimize
from fuseforge.plan import KernelStep
from fuseforge.report import render

SEED = next(p for p in SEED_MODELS if p.stem == "gemm_sigmoid_scaling_residualadd")  # `make run`'s model
SECTIONS = ("Operators replaced", "Fusions and their benefit", "Algorithmic changes",
            "Operators left unchanged, and why", "How the kernels are implemented and called",
            "Expected speedup and memory saving (cost model)", "Measured on the GPU")

CONV_RELU_SUM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3)
        self.linear = nn.Linear(16, 32)

    def forward(self, x):
        y = torch.relu(self.conv(x)) * 2.0  # a convolution (stays cuDNN) with a pointwise chain after it
        return self.linear(y.mean((2, 3))).sum(dim=1)  # a sum over a linear's outputs: a rewrite


def get_inputs():
    return [torch.randn(4, 3, 16, 16)]


def get_init_inputs():
    return []
"""


def section(report: str, title: str) -> str:
    assert f"## {title}\n" in report, f"no section {title!r}"
    return report.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def words(text: str) -> int:
    return len(text.split())


@pytest.fixture(scope="module")
def seed_run(tmp_path_factory):
    return optimize(OptimizeConfig(model_path=SEED, out_dir=tmp_path_factory.mktemp("seed"), gpu=False))


@pytest.fixture(scope="module")
def conv_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("conv")
    (folder / "conv_relu_sum.py").write_text(CONV_RELU_SUM)
    return optimize(OptimizeConfig(model_path=folder / "conv_relu_sum.py", out_dir=folder / "out", gpu=False))


def _report(run) -> str:
    return (run.config.out_dir / "report.md").read_text()


def _gpu_records(verdict="correct", reason=None) -> tuple[dict, dict]:
    """50_verify.json and 60_bench.json as the GPU stages write them (the fields the report reads)."""
    cases = [{"seed": s, "distribution": d, "batch": None, "passed": True, "reason": None}
             for s in range(3) for d in ("file", "signed")]
    cases.append({"seed": 0, "distribution": "file", "batch": 513, "passed": verdict == "correct",
                  "reason": reason})
    verify = {"verdict": verdict, "reason": reason, "allclose": True, "cases": cases,
              "environment": {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130"},
              "settings": {"tolerance_factor": 2.0},
              "worst": {"cand_rel_err": 2.95e-7, "ref_rel_err": 1.62e-6, "ratio": 0.09}}
    ok = {"status": "ok", "p10_ms": 1.0, "p90_ms": 3.0}
    bench = {"settings": {"trials": 50},
             "variants": {"eager": {**ok, "median_ms": 2.727, "peak_bytes": 64 * 2**20},
                          "compile": {**ok, "median_ms": 2.824, "peak_bytes": 32 * 2**20},
                          "compile_max_autotune": {"status": "skipped", "reason": "off (no --max-autotune)"},
                          "candidate": {**ok, "median_ms": 1.035, "peak_bytes": 32 * 2**20}},
             "speedup": {"vs_eager": 2.63, "vs_compile": 2.73, "vs_compile_max_autotune": None}}
    return verify, bench


def test_the_seed_models_report_is_under_500_words_without_and_with_the_gpus_numbers(seed_run):
    assert words(_report(seed_run)) < 500, _report(seed_run)
    seed_run.verify, seed_run.bench = _gpu_records()
    try:
        assert words(render(seed_run)) < 500, render(seed_run)
    finally:
        seed_run.verify = seed_run.bench = None


def test_the_report_has_a_section_for_each_question_in_the_order_asked(seed_run):
    report = _report(seed_run)
    places = [report.index(f"## {title}\n") for title in SECTIONS]
    assert places == sorted(places)


def test_the_seed_reports_replacement_and_fusion_name_its_ops_kernel_and_what_it_saves(seed_run):
    report = _report(seed_run)
    (group,) = seed_run.plan.groups
    replaced = section(report, "Operators replaced")
    assert f"- `linear` → `sigmoid` → `mul` → `add` → GEMM kernel `{group.name}`: a linear on the tensor cores " \
           "in 3xTF32" in replaced
    assert "so the product is never written and read back" in replaced
    fusion = section(report, "Fusions and their benefit")
    assert f"- `{group.name}` (4 ops): 3 launches fewer and about 192.0 MiB less traffic per call" in fusion
    assert f"reads {', '.join(group.inputs)} once, writes {', '.join(group.outputs)} once" in fusion
    assert "None: no rewrite identity applies" in section(report, "Algorithmic changes")
    assert section(report, "Operators left unchanged, and why").strip() == "None: every op runs in a generated kernel."


def test_the_seed_report_says_how_its_kernel_is_built_and_called_and_links_the_general_description(seed_run):
    how = section(_report(seed_run), "How the kernels are implemented and called")
    (group,) = seed_run.plan.groups
    assert f"`{', '.join(group.outputs)} = kernels.{group.name}({', '.join([*group.inputs, 'stream'])})`" in how
    assert "`load_inline`" in how and "current CUDA stream" in how
    assert how.count("- GEMM kernels: the 3xTF32 GEMM") == 1  # one sentence for the one kind of kernel used
    assert not any(f"- {f.how()[0]}" in how for f in FAMILIES if f.name != "gemm")
    assert "`docs/kernels.md`" in how


def test_the_expected_speedup_and_memory_saving_come_with_their_numbers_and_reasons(seed_run):
    expected = section(_report(seed_run), "Expected speedup and memory saving (cost model)")
    c = seed_run.cost
    assert f"- Speedup: **{c.speedup:.2f}x** vs eager ({c.eager_s * 1e3:.3f} ms → {c.plan_s * 1e3:.3f} ms): " \
           f"the plan makes 1 launch for eager's {c.eager_launches}" in expected
    assert "GEMM kernels run at up to" in expected  # the GEMM family's reason
    assert f"- Memory saving: **{c.memory_saving:.0%}** (peak activation memory 96.0 MiB → 32.0 MiB), because the " \
           "3 intermediate tensors inside the kernels (96.0 MiB) are never allocated" in expected
    assert "Not measured: GPU stages not run" in section(_report(seed_run), "Measured on the GPU")


def test_the_general_descriptions_of_the_kernel_families_are_in_docs_and_not_in_the_report(seed_run):
    docs = (REPO / "docs" / "kernels.md").read_text()
    for family in FAMILIES:  # a family added to the registry must be described there
        assert f"## Family `{family.name}`" in docs, family.name
    paragraphs = [p for p in docs.split("\n\n") if words(p) > 60]
    assert len(paragraphs) >= len(FAMILIES)
    report = _report(seed_run)
    assert not any(p[:80] in report for p in paragraphs)


def test_a_report_with_a_rewrite_a_torch_call_and_a_pointwise_kernel_explains_each(conv_run):
    report = _report(conv_run)
    assert conv_run.rewrites.firings, "the test model must fire a rewrite"
    algorithmic = section(report, "Algorithmic changes")
    for f in conv_run.rewrites.firings:
        assert f"- **{f.rule}** at `{f.node}`: {f.identity.rstrip('.')}. Holds for {f.scope}." in algorithmic
    assert "recomputed from the live parameters in every forward" in algorithmic
    unchanged = section(report, "Operators left unchanged, and why")
    by_name = {n.name: n for n in conv_run.captured.graph.nodes}
    torch_ops = [s.node for s in conv_run.plan.steps if not isinstance(s, KernelStep)
                 and str(by_name[s.node].target) not in VIEW_OPS and by_name[s.node].target is not operator.getitem]
    assert torch_ops
    for name in torch_ops:  # each op left to PyTorch has its line with a reason
        line = next(line for line in unchanged.splitlines() if f"({name}):" in line)
        assert len(line.split("):", 1)[1].split()) >= 5, line
    conv = next(n for n in torch_ops if "conv" in str(by_name[n].target))
    assert "cuDNN" in next(line for line in unchanged.splitlines() if f"({conv}):" in line)
    replaced = section(report, "Operators replaced")
    how = section(report, "How the kernels are implemented and called")
    for g in conv_run.plan.groups:
        assert f"`{g.name}`" in replaced and f"kernels.{g.name}(" in how
    assert ("- Pointwise kernels:" in how) == any(g.family is None for g in conv_run.plan.groups)
    assert "the ops left unchanged stay torch calls between them" in how
    assert "the ops left to PyTorch take" in section(report, "Expected speedup and memory saving (cost model)")


def test_the_gpus_verdict_cases_times_and_peak_memory_are_reported_next_to_the_prediction(seed_run):
    seed_run.verify, seed_run.bench = _gpu_records()
    try:
        report = render(seed_run)
    finally:
        seed_run.verify = seed_run.bench = None
    assert f"| speedup vs eager (measured / predicted) | 2.63x / {seed_run.cost.speedup:.2f}x |" in report
    measured = section(report, "Measured on the GPU")
    assert "**correct**, 7 of 7 cases passed (seeds 0, 1, 2 × inputs file/signed, batch 513)" in measured
    assert "Worst: 2.95e-07 (eager fp32: 1.62e-06; 9% of the allowed error)" in measured
    assert "| candidate | 1.035 ms | 32.0 MiB |" in measured and "| eager | 2.727 ms | 64.0 MiB |" in measured
    assert "compile_max_autotune" not in measured  # a variant that was not asked for is not a row
    assert "2.73x vs torch.compile" in measured


def test_a_case_that_passed_by_the_majority_of_its_draws_says_so(seed_run):
    seed_run.verify, seed_run.bench = _gpu_records()
    account = "7 of 9 draws within the bound (an error carried by 1.1 element(s) on the first)"
    seed_run.verify["cases"][1]["redraws"] = account
    try:
        measured = section(render(seed_run), "Measured on the GPU")
    finally:
        seed_run.verify = seed_run.bench = None
    assert f"; seed 0 / signed passed over its draws, its error on few elements: {account}" in measured


def test_a_failed_verification_says_which_case_failed_and_that_no_model_new_was_written(seed_run):
    seed_run.verify, seed_run.bench = _gpu_records("incorrect", "seed 0 / file: output: error 1e-3 > bound 2e-6")
    try:
        report = render(seed_run)
    finally:
        seed_run.verify = seed_run.bench = None
    assert "| verdict | **incorrect**: seed 0 / file: output: error 1e-3 > bound 2e-6 |" in report
    assert "none: `40_model_new.py` failed verification" in report
    assert "6 of 7 cases passed" in report and "first failure: seed 0 / file:" in report


def test_without_a_fallback_there_is_no_plan_kept_section(seed_run):
    assert not seed_run.ladder and "## Plan kept" not in _report(seed_run)


def test_when_a_rung_fell_the_report_says_which_plan_was_kept_and_why_the_one_above_was_left(tmp_path, monkeypatch):
    from fuseforge import codegen

    source = codegen._source

    def failing(group, by_name):
        if group.family is not None and group.family.name == "gemm":
            raise RuntimeError("injected: the GEMM kernel does not build")
        return source(group, by_name)

    monkeypatch.setattr(codegen, "_source", failing)
    run = optimize(OptimizeConfig(model_path=SEED, out_dir=tmp_path / "out", gpu=False))
    assert run.ladder and not any(g.family is not None and g.family.name == "gemm" for g in run.plan.groups)
    kept = section((tmp_path / "out" / "report.md").read_text(), "Plan kept")
    assert f"The plan with {describe(run.config)}. Other plans tried:" in kept
    left = run.ladder[0].removeprefix("The plan with ").split(". Its artefacts:")[0]
    assert plans_left(kept) == (describe(run.config), [left])  # what the fuzz campaign reads back
    assert re.search(r"- The plan with every kernel family failed at codegen \(attributed to the gemm family\): "
                     r".*injected: the GEMM kernel does not build.*attempts/1_every-kernel-family/", kept), kept
    assert words((tmp_path / "out" / "report.md").read_text()) < 500


def test_docs_kernels_is_in_the_repository_where_the_report_points():
    assert Path(REPO / "docs" / "kernels.md").is_file()


def test_the_calls_shapes_name_the_free_batch_size_batch_instead_of_its_symbol(seed_run):
    from fuseforge.report_kernels import batch_named

    how = section(_report(seed_run), "How the kernels are implemented and called")
    assert "[batch, 8192]" in how and not re.search(r"'s\d+'", how)
    two = ["- a: iteration shape ['s7', 8]", "- b: iteration shape ['s9', 8]"]
    assert batch_named(two) == two  # two free sizes: which is the batch is not known, so both stay
