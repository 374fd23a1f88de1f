"""Every problem model goes through the CPU stages: plan checked in float64, CUDA compiled, interface kept."""

import inspect
import operator
import shutil
import subprocess

import pytest
import torch
from conftest import ALL_MODELS
from golden_digests import assert_the_generated_code_is_the_committed_one

from fuseforge.config import OptimizeConfig
from fuseforge.cost import VIEW_OPS
from fuseforge.families import FAMILIES
from fuseforge.load import import_model_file
from fuseforge.pipeline import optimize
from fuseforge.plan import KernelStep

NVCC = shutil.which("nvcc")
IDS = [p.stem for p in ALL_MODELS]


@pytest.fixture(scope="module", params=ALL_MODELS, ids=IDS)
def cpu_run(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param.stem)
    return optimize(OptimizeConfig(model_path=request.param, out_dir=out, gpu=False))


def test_the_plan_matches_the_model_in_float64_on_the_cpu(cpu_run):
    assert cpu_run.cpu_check.passed, cpu_run.cpu_check.detail
    assert cpu_run.cpu_check.max_rel_error <= 1e-9
    assert not cpu_run.ladder, f"the default plan was left: {cpu_run.ladder}"  # a failing family shows here


def test_the_generated_plan_kernels_binding_and_model_new_are_the_committed_ones(cpu_run):
    assert_the_generated_code_is_the_committed_one(cpu_run.config.model_path, cpu_run.config.out_dir)


def test_every_stage_wrote_its_artefact(cpu_run):
    out = cpu_run.config.out_dir
    for name in ("00_captured.txt", "10_rewritten.txt", "20_partition.txt", "30_kernels/kernels.cu",
                 "30_kernels/binding.cpp", "40_model_new.py", "report.md"):
        assert (out / name).exists(), name
    assert not (out / "model_new.py").exists(), "an unverified module must not be emitted as the result"


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_the_generated_kernels_compile_for_hopper_without_spills(cpu_run, tmp_path):
    _compiles_without_spills(cpu_run.config.out_dir / "30_kernels" / "kernels.cu", tmp_path)


def _compiles_without_spills(source, tmp_path):
    result = subprocess.run(
        [NVCC, "-cubin", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Werror", "all-warnings",
         "-Xptxas", "-v,-warn-spills,-warn-lmem-usage", "-o", str(tmp_path / "k.cubin"), str(source)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    for line in result.stderr.splitlines():
        if "spill" in line:
            assert "0 bytes spill stores, 0 bytes spill loads" in line, line


def test_model_new_keeps_the_signature_and_the_seeded_state_dict(cpu_run):
    original = cpu_run.loaded.module
    emitted = import_model_file(cpu_run.config.out_dir / "40_model_new.py")
    assert inspect.signature(emitted.ModelNew.__init__) == inspect.signature(original.Model.__init__)
    init = original.get_init_inputs()
    torch.manual_seed(123)
    reference = original.Model(*init)
    torch.manual_seed(123)
    candidate = emitted.ModelNew(*init)
    ref_state, new_state = reference.state_dict(), candidate.state_dict()
    assert list(new_state) == list(ref_state)
    for key in ref_state:
        assert torch.equal(new_state[key], ref_state[key]), key
    candidate.load_state_dict(reference.state_dict(), strict=True)
    assert [n for n, _ in candidate.named_parameters()] == [n for n, _ in reference.named_parameters()]


def test_model_new_refuses_init_args_it_was_not_compiled_for(cpu_run):
    emitted = import_model_file(cpu_run.config.out_dir / "40_model_new.py")
    init = list(cpu_run.loaded.init_args)
    scalar_positions = [i for i, a in enumerate(init) if isinstance(a, float)]
    if not scalar_positions:
        pytest.skip("no float init arg to change")
    init[scalar_positions[0]] += 0.5
    with pytest.raises(ValueError, match="compiled for init args"):
        emitted.ModelNew(*init)


def _section(run, title: str) -> str:
    report = (run.config.out_dir / "report.md").read_text()
    return report.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_report_says_why_each_op_left_to_pytorch_stays_and_names_buffer_updates_as_such(cpu_run):
    section = _section(cpu_run, "Operators left unchanged, and why")
    by_name = {n.name: n for n in cpu_run.captured.graph.nodes}
    computing = [s.node for s in cpu_run.plan.steps if not isinstance(s, KernelStep)
                 and by_name[s.node].target is not operator.getitem and str(by_name[s.node].target) not in VIEW_OPS]
    if not computing:
        assert "None: every op runs in a generated kernel." in section or "views and tuple accesses" in section
    for name in computing:  # one line each, with a reason of its own
        line = next((line for line in section.splitlines() if f"({name}): " in line), None)
        assert line is not None, f"{name} is left to PyTorch but has no line:\n{section}"
        assert len(line.split("): ", 1)[1].split()) >= 5, line
    for fqn, source in cpu_run.captured.buffer_mutations.items():
        if source in computing:
            line = next(line for line in section.splitlines() if f"({source}): " in line)
            assert f"buffer `{fqn}`" in line and "derives a weight" not in line, line


def test_the_report_names_each_kernel_and_only_the_kinds_of_kernel_the_plan_has(cpu_run):
    replaced = _section(cpu_run, "Operators replaced")
    how = _section(cpu_run, "How the kernels are implemented and called")
    for g in cpu_run.plan.groups:
        assert f" `{g.name}`: " in replaced and f"kernels.{g.name}(" in how, g.name
    used = {g.family for g in cpu_run.plan.groups}
    for family in FAMILIES:  # the sentence on how a kind of kernel works is there exactly when the plan uses it
        assert (f"- {family.how()[0]}" in how) == (family in used), family.name
    assert ("- Pointwise kernels:" in how) == (None in used)
