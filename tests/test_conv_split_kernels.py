"""Conv kernels on tensor cores in 3xTF32: where eager's cuDNN runs a convolution in exact fp32 (measured on the GPU
before partitioning), the implicit-GEMM kernel splits each operand into a TF32 big part and a small part and adds
three products a k-tile into a fresh accumulator (fp32-class products), with 8-channel chunks (up to 4 taps a
k-tile) below 32 input channels.

What is planned (the instance rule, the direct kernel's convolutions it replaces where priced faster, what stays),
nvcc compile checks of the generated code, the float64 check of the plan, and on a GPU the generated kernels against
float64 of the exact operands within twice eager's exact-fp32 error (a TF32 kernel's error is ~1000x that).
"""

import dataclasses
import types
from unittest import mock

import pytest
import torch
from compile_check import NVCC, assert_compiles_for_hopper_without_spills
from conftest import PROBLEMS
from conv_group_checks import assert_conv_groups_match_the_graph_in_float64, conv_kernel_failures
from torch import nn

from fuseforge.capture import capture
from fuseforge.codegen import generate
from fuseforge.families import named
from fuseforge.families.conv import tiling
from fuseforge.families.conv.group import (
    CUDNN_MEASURED,
    EAGER_CLASS,
    is_conv_op,
    recognise,
    split_alternative,
)
from fuseforge.load import LoadedModel, load_model_file
from fuseforge.partition import partition
from fuseforge.rewrite import rewrite


class SplitForms(nn.Module):
    """One convolution of each path: 12 channels (8-channel chunks, 3 taps a k-tile), 40 channels dilated (32-channel
    chunks, 128 output channels), 3-D with 10 channels, transposed 3-D of stride 2 (32-channel chunks, parity classes
    of 1-8 taps) and transposed 2-D of stride 2 with 12 channels (8-channel chunks, 4 a k-tile)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(12, 70, 3, padding=1)
        self.b = nn.Conv2d(40, 130, 3, dilation=2, bias=False)
        self.c = nn.Conv3d(10, 29, (3, 2, 3), padding=(1, 0, 1))
        self.d = nn.ConvTranspose3d(32, 20, 3, stride=2, padding=1, output_padding=(0, 1, 0))
        self.e = nn.ConvTranspose2d(12, 33, 4, stride=2)

    def forward(self, x, v, u, t):
        return (torch.relu(self.a(x)) * 0.5, self.b(v) - 1.0, torch.tanh(self.c(u)), self.d(t), self.e(x))


def _inputs(batch=2):
    return (torch.randn(batch, 12, 21, 64), torch.randn(batch, 40, 13, 37), torch.randn(batch, 10, 5, 9, 35),
            torch.randn(batch, 32, 4, 6, 5))


def _captured(module, *inputs):
    loaded = LoadedModel(path=types.SimpleNamespace(name="t.py", stem="t"), source="", module=None,
                         model=module.eval(), init_args=[], inputs=list(inputs), outputs=[], output_is_tuple=False)
    return capture(loaded)


def _mark_fp32(captured):
    for node in captured.graph.nodes:
        if is_conv_op(node):
            node.meta[EAGER_CLASS] = "fp32"


def _forms():
    torch.manual_seed(0)
    captured = _captured(SplitForms(), *_inputs())
    rewrite(captured.graph, captured)
    _mark_fp32(captured)
    with mock.patch("fuseforge.families.conv.group.slower_than_cudnn", return_value=None):
        plan = partition(captured.graph, named("conv"))
    return captured, plan, generate(plan, captured.graph, "split_forms.py")


def test_every_fp32_class_form_is_a_3xtf32_conv_kernel_with_the_chunk_rule():
    _, plan, ext = _forms()
    groups = {g.spec.conv.k: g.spec.conv for g in plan.groups if g.kind == "conv"}
    assert set(groups) == {70, 130, 29, 20, 33}
    assert all(c.kernel == "igemm" and c.tiling.split and not c.tiling.nchw for c in groups.values())
    t = {k: (c.tiling.chunk, c.tiling.chunks, c.tiling.cq, c.tiling.bn, c.tiling.stages, c.tiling.min_blocks)
         for k, c in groups.items()}
    assert t[70] == (8, 3, 16, 64, 4, 1)  # 9 taps x 2 chunks: 3 a k-tile; 4 stages of 36 KB
    assert t[130] == (32, 1, 64, 128, 3, 1)  # 3 stages of 64 KB
    assert t[29] == (8, 4, 16, 64, 4, 1)  # 18 taps x 2 chunks: 4 a k-tile
    assert t[20] == (32, 1, 32, 64, 4, 1)
    assert t[33] == (8, 4, 16, 64, 4, 1)  # every class 4 taps x 2 chunks
    assert "ff_conv_igemm::launch<false, 64, 4, 1, false, 8, 3, true>" in ext.cuda
    assert "ff_conv_igemm::launch_transposed<false, 64, 4, 1, false, 32, 1, true>" in ext.cuda
    assert "ff_conv_igemm_weight(c.w, 16, true)" in ext.binding
    assert ext.cuda.count("ff_d * ff_h * ff_w_in, s, true);") == 5  # every input copy holds both parts


def test_the_report_names_the_3xtf32_precision_and_its_price_only_where_a_kernel_runs_it():
    from fuseforge.families.conv import FAMILY

    _, plan, _ = _forms()
    groups = [g for g in plan.groups if g.kind == "conv"]
    assert all("3xTF32" in FAMILY.replaced(g)[1] and "exact fp32" in FAMILY.replaced(g)[1] for g in groups)
    assert any("3xTF32" in line for line in FAMILY.expected_for(groups))
    assert not any("3xTF32" in line for line in FAMILY.expected_for([]))


def test_the_small_chunk_rule_takes_the_most_taps_a_k_tile_that_divide_every_class():
    assert tiling.choose_split_igemm(8, 64, (1, 254, 254), (9,)).chunks == 3
    assert tiling.choose_split_igemm(8, 64, (1, 254, 254), (8, 4, 4, 2)).chunks == 2
    assert tiling.choose_split_igemm(16, 64, (1, 254, 254), (25,)).chunks == 2  # 25 taps x 2 chunks
    assert tiling.choose_split_igemm(8, 64, (1, 254, 254), (25,)).chunks == 1
    wide = tiling.choose_split_igemm(32, 128, (1, 64, 64), (9,))
    assert (wide.chunk, wide.chunks, wide.cp, wide.cq, wide.bn, wide.stages) == (32, 1, 32, 32, 128, 3)
    for t in (wide, tiling.choose_split_igemm(8, 64, (1, 254, 254), (9,)), tiling.choose_split_igemm(32, 64, (8,) * 3, (1,))):
        # the blocks an SM fit its shared memory (igemm.cuh's launch asks for the ring plus 1 KB and the barriers)
        assert t.min_blocks * tiling.igemm_smem_bytes(t) <= tiling.SMEM_PER_SM and t.stages >= 2
    assert tiling.choose_split_igemm(12, 64, (1, 8, 8), (9,)).cp == 16  # 8-channel chunks: rows of 32 bytes


def test_a_measured_fp32_conv_of_few_channels_stays_cudnn_and_an_unmeasured_one_is_not_split():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.four = nn.Conv2d(4, 64, 7)  # 196 products: past the direct kernel's range
            self.wide = nn.Conv2d(40, 64, 3)

        def forward(self, x, y):
            return self.four(x), self.wide(y)

    captured = _captured(Two(), torch.randn(2, 4, 20, 20), torch.randn(2, 40, 20, 20))
    four, wide = [n for n in captured.graph.nodes if is_conv_op(n)]
    four.meta[EAGER_CLASS] = "fp32"
    assert "mostly zeros at 4 input channels" in recognise(four)
    assert "was not measured" in recognise(wide)
    wide.meta[EAGER_CLASS] = "tf32"
    assert not recognise(wide).tiling.split


def _problem_plan(name, mark, cudnn_ms=None):
    captured = capture(load_model_file(next(PROBLEMS.glob(f"*/{name}.py"))))
    rewrite(captured.graph, captured)
    if mark:
        _mark_fp32(captured)
    for node in captured.graph.nodes:
        if cudnn_ms is not None and is_conv_op(node):  # cuDNN's exact-fp32 times as the GPU measured them
            node.meta[CUDNN_MEASURED] = {"class": "fp32", "ms_nchw": cudnn_ms[0], "ms_nchw_no_bias": cudnn_ms[1]}
    groups = [g for g in partition(captured.graph, named("conv")).groups if g.kind == "conv"]
    return captured, [g.spec.conv for g in groups]


def test_78s_transposed_conv_measured_fp32_and_40_ms_in_cudnn_is_the_3xtf32_kernel():
    """78's transposed 3-D convolution (32 -> 64 channels, 5x5x5, stride 2): eager's cuDNN runs it exact fp32 in
    40.9 ms on an H200 (bench/results/2026-11-28i_gpu), the 3xTF32 kernel took 4.6 ms: priced at its L2 traffic it is
    taken, 32-channel chunks, every parity class in one launch."""
    _, (conv,) = _problem_plan("78_ConvTranspose3d_Max_Max_Sum", True, (40.9, 40.8))
    assert conv.kernel == "igemm" and conv.transposed and conv.tiling.split
    assert (conv.tiling.chunk, conv.tiling.chunks, conv.tiling.bn, conv.tiling.stages) == (32, 1, 64, 4)
    _, convs = _problem_plan("78_ConvTranspose3d_Max_Max_Sum", False)  # unmeasured: cuDNN's
    assert convs == []


def test_on_87_measured_fp32_the_direct_kernel_stays_where_the_3xtf32_kernel_is_priced_slower():
    """87's 8-channel 3x3 convolution: the 3xTF32 kernel with 8-channel chunks measured 4.5 ms with its input copy on
    an H200 (no epilogue), where 87's whole plan with the direct kernel took 3.4 ms: priced at those measured rates,
    the direct kernel stays; the 3xTF32 kernel would be the alternative only on an fp32-class convolution."""
    from fuseforge.families.conv.group import direct_seconds, igemm_seconds

    captured, (measured,) = _problem_plan("87_Conv2d_Subtract_Subtract_Mish", True)
    assert measured.kernel == "direct"
    (node,) = [n for n in captured.graph.nodes if is_conv_op(n)]
    conv = recognise(node)
    assert split_alternative(node, conv) is None
    split = dataclasses.replace(conv, tiling=tiling.choose_split_igemm(8, 64, (1, 254, 254), (9,)))
    assert 4.0e-3 < igemm_seconds(node, split) < 5.0e-3 and direct_seconds(node, conv) < igemm_seconds(node, split)
    node.meta[EAGER_CLASS] = "tf32"  # TF32-class: the 3xTF32 kernel is no alternative whatever its price
    with mock.patch("fuseforge.families.conv.group.igemm_seconds", return_value=0.0):
        assert split_alternative(node, conv) is None
        node.meta[EAGER_CLASS] = "fp32"
        assert split_alternative(node, conv).tiling.split  # priced faster: taken
    for name in ("73_Conv2d_BatchNorm_Scaling", "67_Conv2d_GELU_GlobalAvgPool"):
        assert _problem_plan(name, True)[1][0].kernel == "direct", name  # a norm's or reduction's group


def test_the_3xtf32_forms_plan_passes_the_float64_check_of_its_kernels_against_the_graphs_ops():
    captured, plan, _ = _forms()
    assert_conv_groups_match_the_graph_in_float64(captured, plan)


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_the_generated_3xtf32_conv_kernels_compile_for_hopper_without_spills(tmp_path):
    _, _, ext = _forms()
    report = assert_compiles_for_hopper_without_spills(ext.cuda, tmp_path, max_registers=232)
    assert report.count("conv_igemm_kernel") >= 5
    assert "serialized" not in report


@pytest.mark.gpu
def test_the_generated_3xtf32_conv_kernels_are_fp32_class_against_float64_on_odd_shapes():
    captured, plan, ext = _forms()
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
        failures = conv_kernel_failures(captured, plan, ext,
                                        lambda batch: dict(zip(("x", "v", "u", "t"), _inputs(batch))))
    assert not failures, "\n".join(failures)


def test_every_kernel_without_a_gpu_takes_a_12_channel_conv_as_fp32_class_and_plans_the_3xtf32_kernel(tmp_path):
    """`--every-kernel` without a GPU takes each unmeasured candidate convolution in the class in which a tensor-core
    kernel can take it: below 16 input channels (the TF32 form's least) fp32-class, so the 3xTF32 form is generated
    and checked on the CPU (the float64 check of the plan passes), and the note says so; the default plan keeps cuDNN."""
    from fuseforge import pipeline
    from fuseforge.config import OptimizeConfig

    model = tmp_path / "twelve.py"
    model.write_text("""
import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(12, 40, 3, padding=1)
    def forward(self, x):
        return torch.sigmoid(self.conv(x))
def get_inputs():
    return [torch.randn(2, 12, 9, 37)]
def get_init_inputs():
    return []
""")
    runs = {}
    for every in (True, False):
        out = tmp_path / f"every_{every}"
        runs[every] = pipeline.optimize(OptimizeConfig(model_path=model, out_dir=out, gpu=False, every_kernel=every))
    (group,) = [g for g in runs[True].plan.groups if g.kind == "conv"]
    assert group.spec.conv.kernel == "igemm" and group.spec.conv.tiling.split and group.spec.conv.tiling.chunk == 8
    assert runs[True].cpu_check.passed, runs[True].cpu_check.detail
    assert any("1 of fewer than 16 input channels as fp32-class, for the 3xTF32 form" in n for n in runs[True].notes)
    assert not [g for g in runs[False].plan.groups if g.kind == "conv"]


def test_the_reason_a_convolution_stays_cudnn_names_the_3xtf32_kernel_where_that_is_the_one_priced():
    """Why-not-fused reasons price the same kernel the plan would: on an fp32-class convolution whose 3xTF32 kernel is
    priced below the direct kernel, the reason cuDNN stays names the tensor-core kernel, not the direct one."""
    from fuseforge.families.conv.group import conv_op_reason, direct_seconds

    captured, _ = _problem_plan("87_Conv2d_Subtract_Subtract_Mish", True, (0.5, 0.4))  # cuDNN measured fast
    (node,) = [n for n in captured.graph.nodes if is_conv_op(n)]
    assert conv_op_reason(node).startswith("the direct kernel is expected to take")
    cheaper = 0.9 * direct_seconds(node, recognise(node))
    with mock.patch("fuseforge.families.conv.group.igemm_seconds", return_value=cheaper), \
            mock.patch("fuseforge.families.conv.price.igemm_seconds", return_value=cheaper):
        assert conv_op_reason(node).startswith("the tensor-core kernel is expected to take")
