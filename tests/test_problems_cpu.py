"""Every problem model goes through the CPU stages: plan checked in float64, CUDA compiled, interface kept."""

import inspect
import shutil
import subprocess

import pytest
import torch
from conftest import ALL_MODELS
from golden_digests import assert_the_generated_code_is_the_committed_one

from fuseforge.config import OptimizeConfig
from fuseforge.load import import_model_file
from fuseforge.pipeline import optimize

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


def test_the_report_says_why_each_op_left_to_pytorch_stays_and_names_buffer_updates_as_such(cpu_run):
    report = (cpu_run.config.out_dir / "report.md").read_text()
    section = report.split("## Operators left unchanged, and why", 1)[1].split("\n## ", 1)[0]
    for fqn, source in cpu_run.captured.buffer_mutations.items():
        if any(f"({source})" in line for line in section.splitlines()):
            line = next(line for line in section.splitlines() if f"({source})" in line)
            assert f"buffer `{fqn}`" in line and "derives a weight" not in line, line


def test_the_report_names_only_the_kinds_of_kernel_the_plan_has(cpu_run):
    _intro_names_the_kinds_of_kernel(cpu_run)


def _intro_names_the_kinds_of_kernel(run):
    report = (run.config.out_dir / "report.md").read_text()
    intro = next(line for line in report.splitlines() if line.startswith("fuseforge captured the model"))
    kinds = {g.kind for g in run.plan.groups}
    assert ("over the trailing axes" in intro) == ("rows" in kinds), intro
    assert ("GEMMs" in intro) == ("gemm" in kinds), intro
    assert ("batch and group norms" in intro) == ("channel_norms" in kinds), intro
