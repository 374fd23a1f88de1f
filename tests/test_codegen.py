"""Codegen: the binding unit compiles against torch's headers; multi-output kernels are spelled."""

import shutil
import subprocess

import pytest
import torch
from compile_check import GXX, compile_binding
from test_partition import _captured
from torch import nn

from fuseforge.codegen import generate
from fuseforge.partition import partition

NVCC = shutil.which("nvcc")


class TwoOutputsAndABias(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(8))

    def forward(self, x):
        a = torch.tanh(x + self.bias)
        return a * 2.0, a.sum(dim=1)


@pytest.fixture(scope="module")
def extension():
    captured = _captured(TwoOutputsAndABias(), torch.randn(4, 8))
    return generate(partition(captured.graph), captured.graph, "two_outputs.py")


def test_a_kernel_with_two_outputs_returns_both_from_its_binding(extension):
    (kernel,) = extension.kernels
    assert "std::vector<torch::Tensor>" in kernel.binding
    assert kernel.binding.count("torch::empty(") == 2


def test_the_extension_name_changes_when_the_source_changes(extension):
    captured = _captured(TwoOutputsAndABias(), torch.randn(4, 8))
    plan = partition(captured.graph)
    assert generate(plan, captured.graph, "two_outputs.py").name == extension.name
    assert generate(plan, captured.graph, "other.py").name != extension.name


@pytest.mark.skipif(GXX is None, reason="g++ is not installed")
def test_the_binding_unit_compiles_against_torch_headers(extension, tmp_path):
    result = compile_binding(extension, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
@pytest.mark.parametrize("std", ["c++17", "c++20"])
def test_the_kernel_unit_compiles_as_cpp17_and_cpp20(extension, tmp_path, std):
    source = tmp_path / "kernels.cu"
    source.write_text(extension.cuda)
    result = subprocess.run([NVCC, f"-std={std}", "-cubin", "-gencode=arch=compute_90a,code=sm_90a",
                             "-Werror", "all-warnings", "-o", str(tmp_path / "k.cubin"), str(source)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


class Masked(nn.Module):
    def forward(self, x, mask):
        return torch.where(mask, torch.tanh(x), x * 0.5)


def test_a_plan_that_hands_a_kernel_a_bool_tensor_is_refused_by_codegen_on_the_cpu():
    from dataclasses import replace

    from fuseforge.codegen import KernelCodegenError

    captured = _captured(Masked(), torch.randn(4, 8), torch.rand(4, 8) > 0.5)
    plan = partition(captured.graph)
    assert all("mask" not in g.inputs for g in plan.groups)  # the planner keeps the where a torch call
    group = plan.groups[0]
    bad = replace(plan, groups=[replace(group, inputs=(*group.inputs, "mask"))])
    steps = [replace(s, group=bad.groups[0]) if getattr(s, "group", None) is group else s for s in plan.steps]
    with pytest.raises(KernelCodegenError, match="input mask is a torch.bool tensor; kernels read float32"):
        generate(replace(bad, steps=steps), captured.graph, "masked.py")


# A launcher as the families write them: a template over the epilogue with a static "done once" state.
_LAUNCHER_UNIT = r"""
struct fused_linear_relu_epilogue { int value = VALUE; };
template <class Epilogue> int launch() {
    static int configured = 0;  // e.g. the kernel's raised shared-memory limit, set once
    if (configured == 0) configured = Epilogue{}.value;
    return configured;
}
extern "C" __attribute__((visibility("default"))) int call() { return launch<fused_linear_relu_epilogue>(); }
"""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_two_extensions_loaded_in_one_process_keep_their_own_launcher_state(extension, tmp_path):
    """Two units with a launcher instantiated for an epilogue of the same name, built with the extensions' nvcc flags
    and loaded side by side (RTLD_LOCAL, as Python loads extensions): each launcher keeps its own static state. With
    nvcc's defaults GCC makes the static one process-wide symbol, and the second extension's kernel would launch
    without its shared-memory limit raised."""
    import ctypes
    import os

    host = [f for f in extension.nvcc_flags if f.startswith("-Xcompiler=")]
    assert host == ["-Xcompiler=-fvisibility=hidden"] and "-fvisibility=hidden" in extension.cflags
    results = []
    for value in (1, 2):
        source = tmp_path / f"unit{value}.cu"
        source.write_text(_LAUNCHER_UNIT.replace("VALUE", str(value)))
        lib = tmp_path / f"unit{value}.so"
        built = subprocess.run(["nvcc", "-shared", "-Xcompiler=-fPIC", *extension.nvcc_flags, str(source), "-o",
                                str(lib)], capture_output=True, text=True, timeout=300)
        assert built.returncode == 0, built.stderr
        results.append(ctypes.CDLL(str(lib), mode=os.RTLD_LOCAL))
    assert [lib.call() for lib in results] == [1, 2]
