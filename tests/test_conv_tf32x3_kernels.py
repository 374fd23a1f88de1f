"""Conv kernels on tensor cores in fp32 class (the conv family's 3xTF32 member): a convolution with short dot
products and the pointwise chain after it as one kernel whose products run as three TF32 products each.

The plan picks it over the direct kernel only by its measured rate (`rates.CONV_TF32X3_FLOPS`); until that is
measured on a GPU it picks the direct kernel, as before. With a rate given, the plans of a problem model and of
odd forms, nvcc/g++ compile checks of the generated code, and on a GPU the generated kernels against float64 (the
bound eager's fp32 error sets, cuDNN's TF32 off).
"""

import types
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from compile_check import GXX, NVCC, assert_compiles_for_hopper_without_spills, compile_binding
from conftest import PROBLEMS
from conv_group_checks import assert_conv_groups_match_the_graph_in_float64, conv_kernel_failures
from torch import nn

from fuseforge import rates
from fuseforge.capture import capture
from fuseforge.codegen import generate
from fuseforge.families import named
from fuseforge.families.conv import FAMILY, tiling
from fuseforge.load import LoadedModel, load_model_file
from fuseforge.partition import partition
from fuseforge.rewrite import rewrite

FAST = {2: 80e12, 3: 60e12}  # a rate above the direct kernel's (23 and 15-35 TFLOP/s): the plan picks 3xTF32
SLOW = {2: 5e12, 3: 5e12}  # one below it: the plan keeps the direct kernel


def _plan(captured):
    rewrite(captured.graph, captured)
    return partition(captured.graph, named("conv"))


def _model_plan(name, rate):
    captured = capture(load_model_file(next(PROBLEMS.glob(f"*/{name}.py"))))
    with mock.patch.object(rates, "CONV_TF32X3_FLOPS", rate):
        return captured, _plan(captured)


def _captured(module, *inputs):
    loaded = LoadedModel(path=types.SimpleNamespace(name="t.py", stem="t"), source="", module=None,
                         model=module.eval(), init_args=[], inputs=list(inputs), outputs=[], output_is_tuple=False)
    return capture(loaded)


def test_until_its_rate_is_measured_the_plan_keeps_the_direct_kernel():
    assert rates.CONV_TF32X3_FLOPS is None
    _, plan = _model_plan("87_Conv2d_Subtract_Subtract_Mish", None)
    (group,) = plan.groups
    assert group.spec.conv.kernel == "direct"


def test_a_measured_rate_above_the_direct_kernels_makes_87s_convolution_a_3xtf32_kernel_with_its_epilogue():
    captured, plan = _model_plan("87_Conv2d_Subtract_Subtract_Mish", FAST)
    (group,) = plan.groups
    c = group.spec.conv
    assert c.kernel == "tf32x3"
    assert c.tiling == tiling.Tf32x3Tiling(nt=8, wh=4)  # 64 output channels, 254 rows
    assert [n.rstrip("_0123456789") for n in group.nodes] == ["conv2d", "add", "sub", "sub", "mish"]
    with mock.patch.object(rates, "CONV_TF32X3_FLOPS", FAST):
        ext = generate(plan, captured.graph, "m87.py")
    assert "ff_conv_tf32x3::launch<8, 1, 3, 3, 8, 4>" in ext.cuda
    assert "conv_direct_kernel" not in ext.cuda  # only the kernel the plan uses is compiled
    described = "\n".join(FAMILY.describe(group))
    assert "3xTF32 tensor cores, 64 channels x 4 rows of 32 a block" in described
    _, slow = _model_plan("87_Conv2d_Subtract_Subtract_Mish", SLOW)
    assert slow.groups[0].spec.conv.kernel == "direct"


def test_the_tiling_takes_as_many_n8_tiles_as_the_channels_need_and_fewer_warps_for_short_outputs():
    assert tiling.choose_tf32x3(3, 16, (3, 3, 3), (1, 1, 1), (1, 1, 1), 30) == tiling.Tf32x3Tiling(2, 4)
    assert tiling.choose_tf32x3(3, 13, (1, 3, 3), (1, 2, 2), (1, 2, 2), 2) == tiling.Tf32x3Tiling(2, 2)
    assert tiling.choose_tf32x3(3, 13, (1, 3, 3), (1, 2, 2), (1, 2, 2), 1) == tiling.Tf32x3Tiling(2, 1)
    assert tiling.choose_tf32x3(8, 200, (1, 3, 3), (1, 1, 1), (1, 1, 1), 100) == tiling.Tf32x3Tiling(8, 4)
    assert "16 input channels" in tiling.choose_tf32x3(17, 16, (1, 3, 3), (1, 1, 1), (1, 1, 1), 100)
    # a 16-channel 7x7x7 window's weight fragments alone pass half an SM's shared memory
    assert "do not fit" in tiling.choose_tf32x3(16, 64, (7, 7, 7), (1, 1, 1), (1, 1, 1), 100)


def test_the_useful_fraction_counts_the_channels_padded_to_eight():
    t = tiling.Tf32x3Tiling(8, 8)
    assert tiling.tf32x3_useful_fraction(t, 8, 64, 64, 64) == 1.0
    assert tiling.tf32x3_useful_fraction(t, 3, 64, 64, 64) == pytest.approx(3 / 8)
    assert tiling.tf32x3_useful_fraction(t, 8, 24, 12, 40) == pytest.approx(24 / 64 * 12 / 16 * 40 / 64)


class OddForms(nn.Module):
    """Padding, stride and dilation per axis, 3 and 5 input channels (padded to 8), 3-D, a channel tail (13 of
    16), no bias, and outputs with row and column tails; epilogues with full, channel and scalar operands."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 13, 3, stride=2, padding=1, dilation=2)
        self.b = nn.Conv3d(5, 16, (3, 2, 3), stride=(1, 2, 1), padding=(1, 0, 2), dilation=(2, 1, 1))
        self.c = nn.Conv2d(8, 24, 2, bias=False)
        self.d = nn.Conv2d(8, 64, 3)
        self.register_buffer("scale", torch.tensor(0.75))

    def forward(self, x, r, v, u):
        y = torch.relu(self.a(x)) + r * self.scale
        z = torch.tanh(self.b(v)) * 2.0
        w = F.gelu(self.c(u))
        m = F.mish(self.d(u) - 0.5)
        return y, z, w, m


def _inputs(batch=2):
    return (torch.randn(batch, 3, 67, 129), torch.randn(batch, 13, 33, 64), torch.randn(batch, 5, 9, 33, 70),
            torch.randn(batch, 8, 40, 45))


def _odd_forms():
    torch.manual_seed(0)
    captured = _captured(OddForms(), *_inputs())
    with mock.patch.object(rates, "CONV_TF32X3_FLOPS", FAST), \
            mock.patch("fuseforge.families.conv.group._slower_than_cudnn", return_value=False):
        plan = _plan(captured)
        ext = generate(plan, captured.graph, "odd_forms.py")
    return captured, plan, ext


def test_every_odd_form_is_a_3xtf32_kernel():
    _, plan, ext = _odd_forms()
    groups = [g for g in plan.groups if g.kind == "conv"]
    assert len(groups) == 4 and {g.spec.conv.kernel for g in groups} == {"tf32x3"}
    assert {g.spec.conv.c for g in groups} == {3, 5, 8}
    assert ext.cuda.count("ff_conv_tf32x3::launch<") == 4


def test_the_odd_forms_plan_passes_the_float64_check_of_its_kernels_against_the_graphs_ops():
    captured, plan, _ = _odd_forms()
    assert_conv_groups_match_the_graph_in_float64(captured, plan)


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_the_generated_3xtf32_kernels_compile_for_hopper_without_spills(tmp_path):
    _, _, ext = _odd_forms()
    report = assert_compiles_for_hopper_without_spills(ext.cuda, tmp_path, max_registers=170)
    assert report.count("conv_tf32x3_kernel") >= 4


@pytest.mark.skipif(GXX is None, reason="needs g++")
def test_the_generated_3xtf32_binding_compiles(tmp_path):
    _, _, ext = _odd_forms()
    result = compile_binding(ext, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.gpu
def test_the_generated_3xtf32_kernels_match_float64_on_odd_shapes_like_eager_fp32_does():
    captured, plan, ext = _odd_forms()
    torch.backends.cudnn.allow_tf32 = False  # eager in fp32: the class the kernel claims
    failures = conv_kernel_failures(captured, plan, ext,
                                    lambda batch: dict(zip(("x", "r", "v", "u"), _inputs(batch))))
    assert not failures, "\n".join(failures)
