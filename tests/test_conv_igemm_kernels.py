"""Conv kernels on tensor cores (the conv family's implicit-GEMM member): a stride-1 convolution with 16 or more
input channels, which eager's cuDNN runs TF32 (measured on the GPU before partitioning), and the pointwise chain
after it as one TF32 implicit-GEMM kernel.

What is taken and what stays cuDNN and why (measured TF32, measured fp32, not measured, strided, few channels),
the instance rule fitted on the H100 lab, the measurement hook, nvcc/g++ compile checks of the generated code, the
float64 check of the plan, and on a GPU the generated kernels against float64 on odd shapes.
"""

import dataclasses
import types
from unittest import mock

import pytest
import torch
from compile_check import GXX, NVCC, assert_compiles_for_hopper_without_spills, compile_binding
from conftest import PROBLEMS
from conv_group_checks import assert_conv_groups_match_the_graph_in_float64, conv_kernel_failures
from torch import nn

from fuseforge.capture import capture
from fuseforge.codegen import generate
from fuseforge.families import named
from fuseforge.families.conv import FAMILY, tiling
from fuseforge.families.conv.group import (
    CUDNN_MEASURED,
    EAGER_CLASS,
    conv_op_reason,
    igemm_candidate,
    recognise,
)
from fuseforge.families.conv.price import cudnn_seconds, slower_than_cudnn
from fuseforge.load import LoadedModel, load_model_file
from fuseforge.partition import format_plan, partition
from fuseforge.rewrite import rewrite


def _convs(captured):
    return [n for n in captured.graph.nodes if str(n.target).startswith("aten.conv")]


def _mark(captured, cls):
    for node in _convs(captured):
        if igemm_candidate(node):
            node.meta[EAGER_CLASS] = cls


def _plan(captured, *families):
    rewrite(captured.graph, captured)
    return partition(captured.graph, named(*families))


def _model(name):
    return capture(load_model_file(next(PROBLEMS.glob(f"*/{name}.py"))))


def _captured(module, *inputs, train=False):
    loaded = LoadedModel(path=types.SimpleNamespace(name="t.py", stem="t"), source="", module=None,
                         model=module.train(train), init_args=[], inputs=list(inputs), outputs=[],
                         output_is_tuple=False)
    return capture(loaded)


# ---------------------------------------------------------------------------------------- problem models

def test_a_64_channel_conv_that_eager_runs_tf32_is_a_tensor_core_conv_kernel_where_priced_faster():
    captured = _model("52_Conv2d_Activation_BatchNorm")
    rewrite(captured.graph, captured)
    _mark(captured, "tf32")
    with mock.patch("fuseforge.families.conv.group.slower_than_cudnn", return_value=None):
        plan = partition(captured.graph, named("conv"))
    (group,) = [g for g in plan.groups if g.kind == "conv"]
    c = group.spec.conv
    assert c.kernel == "igemm" and (c.c, c.k, c.window) == (64, 128, (1, 3, 3))
    assert (c.tiling.nchw, c.tiling.bn, c.tiling.box) == (True, 128, (1, 4, 32))


def test_tf32_the_tensor_core_kernel_beats_cudnn_channels_last_on_52_only_by_the_pass_its_epilogue_saves():
    """On an H200 (bench/results/2026-11-29c_gpu) the tensor-core kernel ran 52's convolution in 0.88 ms, cuDNN's
    channels-last kernel in 0.45 ms after 0.29 ms of the input's conversion: the kernel is priced faster than that only
    with the pass over the output its epilogue saves. With nothing fused after it the group is slower, and the reason
    names the layout it lost to (against cuDNN's NCHW price alone it would have won)."""
    from fuseforge import cost, rates
    from fuseforge.families.conv.price import direct_seconds, slower_than_cudnn

    captured = _model("52_Conv2d_Activation_BatchNorm")
    rewrite(captured.graph, captured)
    _mark(captured, "tf32")
    (conv,) = _convs(captured)
    anchor = recognise(conv)
    reason = slower_than_cudnn(conv, anchor, "")
    assert reason.startswith("the tensor-core kernel is expected to take") and "cuDNN channels-last" in reason
    assert slower_than_cudnn(conv, anchor, "epilogue") is None
    saved = 2 * cost.nbytes(conv) / rates.BANDWIDTH
    ours = direct_seconds(conv, anchor)
    assert cost.channels_last_conv_seconds(conv) < ours < cost.channels_last_conv_seconds(conv) + saved
    assert ours < cost.conv_seconds(conv)


def test_a_tensor_core_conv_priced_a_few_percent_under_cudnn_stays_cudnn_and_one_priced_well_under_is_the_kernel():
    """The tensor-core kernel's price is an L2 rate fitted within about 0.95-1.1x of its measured times, so a close
    call stays cuDNN's (price.IGEMM_MARGIN): priced 5 % under cuDNN it stays, 15 % under it is the kernel."""
    from fuseforge.families.conv import price

    captured = _model("52_Conv2d_Activation_BatchNorm")
    rewrite(captured.graph, captured)
    _mark(captured, "tf32")
    (conv,) = _convs(captured)
    anchor = recognise(conv)
    cudnn, _ = price.cudnn_seconds(conv, anchor)
    with mock.patch.object(price, "direct_seconds", return_value=0.95 * cudnn):
        reason = price.slower_than_cudnn(conv, anchor, "")
    assert reason.startswith("the tensor-core kernel is expected to take")
    assert reason.endswith("less by under the 10% its price may err: cuDNN stays")
    with mock.patch.object(price, "direct_seconds", return_value=0.85 * cudnn):
        assert price.slower_than_cudnn(conv, anchor, "") is None


def test_the_gate_prices_a_conv_kernel_no_faster_than_its_input_and_output_pass_over_memory():
    """The plan's estimate puts a memory floor under a conv kernel (its input and output at the copy rate); the gate
    puts the same one under its price, so a kernel priced at nothing still loses to a cuDNN call under that floor."""
    from fuseforge import cost, rates
    from fuseforge.families.conv import price

    captured = _model("52_Conv2d_Activation_BatchNorm")
    rewrite(captured.graph, captured)
    _mark(captured, "tf32")
    (conv,) = _convs(captured)
    anchor = recognise(conv)
    floor = (cost.nbytes(conv.all_input_nodes[0]) + cost.nbytes(conv)) / rates.BANDWIDTH
    with mock.patch.object(price, "direct_seconds", return_value=0.0), \
            mock.patch.object(price, "cudnn_seconds", return_value=(0.95 * floor, "")):
        reason = price.slower_than_cudnn(conv, anchor, "")
    assert reason.startswith(f"the tensor-core kernel is expected to take {floor * 1e3:.3f} ms")


def test_the_same_conv_unmeasured_stays_cudnn_and_measured_fp32_is_the_3xtf32_kernel_priced_against_cudnn():
    captured = _model("52_Conv2d_Activation_BatchNorm")
    rewrite(captured.graph, captured)
    (conv,) = _convs(captured)
    assert igemm_candidate(conv)
    assert conv_op_reason(conv).endswith("eager's precision on it was not measured (no GPU at plan time): cuDNN stays")
    assert not any(g.kind == "conv" for g in partition(captured.graph, named("conv")).groups)
    conv.meta[EAGER_CLASS] = "fp32"
    assert not igemm_candidate(conv)  # measured: nothing left to measure
    anchor = recognise(conv)
    assert anchor.kernel == "igemm" and anchor.tiling.split and anchor.tiling.precision == "3xTF32"
    assert (anchor.tiling.nchw, anchor.tiling.chunk, anchor.tiling.cq) == (False, 32, 64)  # channels-last, 32 a chunk
    assert conv_op_reason(conv).startswith("the tensor-core kernel is expected to take")  # priced, not refused
    with mock.patch("fuseforge.families.conv.group.slower_than_cudnn", return_value=None):
        (group,) = [g for g in partition(captured.graph, named("conv")).groups if g.kind == "conv"]
    assert group.spec.conv.tiling.split


def test_a_strided_or_8_channel_conv_is_no_tensor_core_conv_kernel_even_measured_tf32():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.strided = nn.Conv2d(32, 64, 3, stride=2)
            self.narrow = nn.Conv2d(8, 64, 5)  # 200 products: past the direct kernel's range too

        def forward(self, x, y):
            return self.strided(x), self.narrow(y)

    captured = _captured(Two(), torch.randn(2, 32, 20, 20), torch.randn(2, 8, 20, 20))
    strided, narrow = _convs(captured)
    for node in (strided, narrow):
        node.meta[EAGER_CLASS] = "tf32"
    assert conv_op_reason(strided).endswith("the tensor-core kernel takes stride 1 only: cuDNN stays")
    assert "k-tiles would be mostly zeros at 8 input channels" in conv_op_reason(narrow)


def test_the_instance_rule_gives_the_lab_fastest_instance_of_each_tf32_shape():
    # (dims, C, K, input width, output extents) -> the fastest of six instances on an H200 after the channel-by-channel
    # epilogue (bench/results/2026-11-29d_gpu, run1_tf32_blocks_6011715.json: (nchw, BN, stages, blocks, persistent);
    # 64 -> 128 channels at batches 128 and 64 (17's and 52's convolutions): persistent NCHW fastest at both, within
    # 1.5 % of persistent channels-last)
    best = {(2, 64, 128, 128, (1, 126, 126)): (True, 128, 4, 1, True),
            (2, 16, 64, 256, (1, 254, 254)): (False, 64, 3, 2, False),
            (3, 32, 64, 128, (30, 126, 126)): (False, 64, 3, 2, False)}
    for args, want in best.items():
        t = tiling.choose_igemm(*args)
        assert (t.nchw, t.bn, t.stages, t.min_blocks, t.persistent) == want, args
        assert t.box[0] * t.box[1] * t.box[2] == tiling.IGEMM_BM


def test_measuring_marks_each_convolution_with_eagers_class_and_cudnns_times_and_a_failed_measurement_is_a_note(
        tmp_path):
    captured = _model("52_Conv2d_Activation_BatchNorm")
    rewrite(captured.graph, captured)
    (conv,) = _convs(captured)
    row = {"class": "tf32", "channels_last_in_class": True, "ms_nchw": 3.0, "ms_nchw_no_bias": 2.0,
           "ms_channels_last": 1.5, "ms_channels_last_no_bias": 0.5, "ms_to_channels_last": 0.25}
    with mock.patch("fuseforge.layout_precision.measured", return_value={conv.name: row}) as m:
        assert FAMILY.measure_on_gpu(captured.graph, tmp_path) == []
    assert m.call_args.args[0] == frozenset({conv.name}) and conv.meta[EAGER_CLASS] == "tf32"
    assert conv.meta[CUDNN_MEASURED] is row
    del conv.meta[EAGER_CLASS], conv.meta[CUDNN_MEASURED]
    with mock.patch("fuseforge.layout_precision.measured", side_effect=OSError("no device")):
        (note,) = FAMILY.measure_on_gpu(captured.graph, tmp_path)
    assert "could not be measured (no device)" in note and "the tensor-core kernel could take stay cuDNN calls" in note
    assert EAGER_CLASS not in conv.meta and CUDNN_MEASURED not in conv.meta


def test_cudnn_is_priced_at_its_measured_time_where_the_gpu_measured_it():
    """The gate's cuDNN side: the rates' price unmeasured; measured, the call the plan would make (this convolution's
    bias is rewritten into the kernel after it: the no-bias time), channels-last with the input's conversion where
    that is in eager's class and faster -- so a measured cuDNN 10x faster than the rates say keeps cuDNN."""
    captured = _model("52_Conv2d_Activation_BatchNorm")
    rewrite(captured.graph, captured)
    (conv,) = _convs(captured)
    conv.meta[EAGER_CLASS] = "tf32"
    anchor = recognise(conv)
    priced, layout = cudnn_seconds(conv, anchor)
    assert "measured" not in layout and priced > 0
    row = {"class": "tf32", "channels_last_in_class": True, "ms_nchw": 30.0, "ms_nchw_no_bias": 20.0,
           "ms_channels_last": 15.0, "ms_channels_last_no_bias": 5.0, "ms_to_channels_last": 1.0}
    conv.meta[CUDNN_MEASURED] = row
    assert cudnn_seconds(conv, anchor) == (pytest.approx(6e-3), " channels-last (measured)")
    row["channels_last_in_class"] = False
    assert cudnn_seconds(conv, anchor) == (pytest.approx(20e-3), " (measured)")
    fast = {**row, "ms_nchw": priced * 1e3 / 20, "ms_nchw_no_bias": priced * 1e3 / 20}
    conv.meta[CUDNN_MEASURED] = fast
    assert "cuDNN" in slower_than_cudnn(conv, anchor, "epilogue")


# ---------------------------------------------------------------------------------------- small forms

class TensorCoreForms(nn.Module):
    """Implicit-GEMM groups of every path: a 2-D conv of 16 -> 130 channels (NCHW path: tiles of 32 columns, W a
    multiple of 4; persistent; two channel tiles), padding and dilation, whose epilogue reads a full residual and a
    scalar and writes a second output; a 2-D conv of 40 -> 140 channels with W not a multiple of 4 (channels-last
    path, persistent, two channel tiles);
    a 3-D conv of 33 -> 29 channels (channels-last path, 3-D boxes)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(16, 130, 3, padding=(1, 2), dilation=(1, 2))
        self.b = nn.Conv2d(40, 140, 3)
        self.c = nn.Conv3d(33, 29, (2, 3, 3), padding=1)
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, x, r, v, u):
        y = self.a(x)
        y = torch.relu(y) + r * self.scale
        z = torch.tanh(self.b(v))
        w = torch.sigmoid(self.c(u))
        return y, y * 2.0, z, w


def _forms_inputs(batch=2):
    x = torch.randn(batch, 16, 21, 64)
    r = torch.randn(batch, 130, 21, 64)
    v = torch.randn(batch, 40, 13, 37)
    u = torch.randn(batch, 33, 5, 9, 35)
    return x, r, v, u


def _forms(tile_pixels: int = tiling.IGEMM_BM, cluster: int = 1):
    """The forms' plan, each tensor-core kernel at the instance rule's tiling or, at 256 `tile_pixels` or a `cluster`
    of 2, on the channels-last path with tiles of that many pixels in clusters of that many blocks (the lab's
    instances)."""
    torch.manual_seed(0)
    captured = _captured(TensorCoreForms(), *_forms_inputs())
    rewrite(captured.graph, captured)
    _mark(captured, "tf32")
    rule = tiling.choose_igemm

    def chosen(dims, c, k, w_in, out, bn=None):
        t = rule(dims, c, k, w_in, out, bn=bn)
        if tile_pixels == t.bm and cluster == t.cluster:
            return t
        return tiling.at_pixels(t, tile_pixels, out, cluster)

    with mock.patch("fuseforge.families.conv.group.slower_than_cudnn", return_value=False), \
            mock.patch.object(tiling, "choose_igemm", chosen):
        plan = partition(captured.graph, named("conv"))
    return captured, plan, generate(plan, captured.graph, f"tensor_core_forms_{tile_pixels}_{cluster}.py")


def test_every_tensor_core_form_is_an_igemm_conv_kernel_on_its_path():
    _, plan, ext = _forms()
    groups = {g.spec.conv.k: g for g in plan.groups if g.kind == "conv"}
    assert set(groups) == {130, 140, 29} and all(g.spec.conv.kernel == "igemm" for g in groups.values())
    assert groups[130].spec.conv.tiling.nchw and len(groups[130].outputs) == 2
    assert sorted(dict(groups[130].spec.operands).values()) == ["channel", "full", "scalar"]  # the bias, r, scale
    assert not groups[140].spec.conv.tiling.nchw and groups[140].spec.conv.tiling.bn == 128
    assert groups[130].spec.conv.tiling.persistent and groups[140].spec.conv.tiling.persistent
    assert not groups[29].spec.conv.tiling.nchw and groups[29].spec.conv.dims == 3
    assert "ff_conv_igemm::launch<true, 128" in ext.cuda and "ff_conv_igemm::prepare_input" in ext.cuda
    assert ext.cuda_flags == ("-gencode=arch=compute_90a,code=sm_90a",)


def test_a_plan_without_tensor_core_conv_kernels_carries_no_igemm_code():
    captured = _model("87_Conv2d_Subtract_Subtract_Mish")
    plan = _plan(captured, "conv")
    assert any(g.kind == "conv" for g in plan.groups)
    ext = generate(plan, captured.graph, "87.py")
    assert "ff_conv_igemm" not in ext.cuda and ext.cuda_flags == ()


def test_the_tensor_core_forms_plan_passes_the_float64_check_of_its_kernels_against_the_graphs_ops():
    captured, plan, _ = _forms()
    assert_conv_groups_match_the_graph_in_float64(captured, plan)


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_the_generated_tensor_core_conv_kernels_compile_for_hopper_without_spills(tmp_path):
    _, _, ext = _forms()
    report = assert_compiles_for_hopper_without_spills(ext.cuda, tmp_path, max_registers=168)
    assert report.count("conv_igemm_kernel") >= 3
    assert "serialized" not in report


def test_tiles_of_256_pixels_cover_the_forms_on_the_channels_last_path_two_wgmmas_a_k8_step():
    _, plan, ext = _forms(256)
    groups = [g for g in plan.groups if g.kind == "conv"]
    assert len(groups) == 3
    for g in groups:
        t = g.spec.conv.tiling
        assert t.bm == 256 and not t.nchw and t.box[0] * t.box[1] * t.box[2] == 256
    assert ext.cuda.count("false, 32, 1, false, false, 256>(") == 3


def test_a_tensor_core_tiling_whose_ring_does_not_fit_an_sm_is_refused_where_it_is_made():
    """A launch asking for more shared memory than an SM has fails with "invalid argument" on the GPU only: 256-pixel
    tiles of 64 channels at 6 stages need 240 KB."""
    t = dataclasses.replace(tiling.choose_igemm(2, 16, 64, 128, (1, 128, 128)), stages=6)
    with pytest.raises(ValueError, match="more than an SM's 232448"):
        dataclasses.replace(t, nchw=False, bm=256, box=(1, 8, 32))
    wide = tiling.at_pixels(t, 256, (1, 128, 128))
    assert (wide.bm, wide.nchw, wide.stages, wide.min_blocks) == (256, False, 5, 1)


def test_every_tiling_the_rules_choose_fits_an_sm_with_its_blocks():
    for dims in (2, 3):
        for c in (3, 8, 16, 40, 64, 130):
            for k in (16, 64, 100, 128, 257):
                for out in ((1, 30, 30), (1, 128, 128), (14, 30, 30)):
                    for t in (tiling.choose_igemm(dims, c, k, out[2] + 2, out),
                              tiling.choose_split_igemm(c, k, out, (9,))):
                        lab = () if t.split else (tiling.at_pixels(t, 256, out), tiling.at_pixels(t, 128, out, 2))
                        for u in (t, *lab):
                            assert u.stages >= 2
                            assert u.min_blocks * tiling.igemm_smem_bytes(u) <= tiling.SMEM_PER_SM, u


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_the_tensor_core_conv_kernels_with_tiles_of_256_pixels_compile_for_hopper_without_spills(tmp_path):
    _, _, ext = _forms(256)
    report = assert_compiles_for_hopper_without_spills(ext.cuda, tmp_path, max_registers=224)
    assert report.count("conv_igemm_kernel") >= 3
    assert "serialized" not in report


def test_clusters_of_two_blocks_take_the_forms_on_the_channels_last_path_at_either_tile_size():
    for pixels in (128, 256):
        _, plan, ext = _forms(pixels, cluster=2)
        tilings = [g.spec.conv.tiling for g in plan.groups if g.kind == "conv"]
        assert len(tilings) == 3 and all(t.cluster == 2 and not t.nchw and t.bm == pixels for t in tilings)
        assert ext.cuda.count(f"false, 32, 1, false, false, {pixels}, 2>(") == 3


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_the_tensor_core_conv_kernels_in_clusters_of_two_compile_for_hopper_without_spills(tmp_path):
    _, _, ext = _forms(256, cluster=2)
    report = assert_compiles_for_hopper_without_spills(ext.cuda, tmp_path, max_registers=224)
    assert report.count("conv_igemm_kernel") >= 3
    assert "serialized" not in report


@pytest.mark.skipif(GXX is None, reason="needs g++")
def test_the_generated_tensor_core_conv_binding_compiles(tmp_path):
    _, _, ext = _forms()
    result = compile_binding(ext, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]


class ChannelReductionForms(nn.Module):
    """Tensor-core convolutions whose values are reduced over their channels: 40 -> 100 channels (one tile of 128),
    scaled, then amin keepdim; a 3-D one of 24 -> 48 channels (one tile of 64) with a relu, then a mean; 40 -> 130
    channels (two tiles) then the values of a max: no tile holds every channel; 24 -> 128 channels with padding on the
    NCHW path (rows of 32 pixels, W a multiple of 4), persistent, then amax."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(40, 100, 3, padding=1)
        self.b = nn.Conv3d(24, 48, 3)
        self.c = nn.Conv2d(40, 130, 3)
        self.d = nn.Conv2d(24, 128, 3, padding=1)

    def forward(self, x, u, v):
        y = torch.amin(self.a(x) * 0.5, dim=1, keepdim=True)
        z = torch.relu(self.b(u)).mean(dim=1)
        m = torch.max(self.c(x), dim=1)[0]
        n = torch.amax(self.d(v), dim=1)
        return y, z, m, n


def _reduction_inputs(batch=2):
    return torch.randn(batch, 40, 13, 37), torch.randn(batch, 24, 6, 9, 35), torch.randn(batch, 24, 11, 64)


def _reduction_forms(every_kernel=True):
    torch.manual_seed(0)
    captured = _captured(ChannelReductionForms(), *_reduction_inputs())
    rewrite(captured.graph, captured)
    _mark(captured, "tf32")
    with mock.patch("fuseforge.families.conv.group.slower_than_cudnn", return_value=None):
        plan = partition(captured.graph, named("conv"), every_kernel=every_kernel)
    return captured, plan, generate(plan, captured.graph, "channel_reduction_forms.py")


def test_by_default_the_tensor_core_kernel_takes_the_channel_reductions_it_is_priced_faster_with():
    _, plan, _ = _reduction_forms(every_kernel=False)
    assert sorted(g.spec.conv.k for g in plan.groups if g.kind == "conv" and g.spec.reduction) == [48, 100, 128]


def test_a_tensor_core_conv_whose_tile_holds_every_channel_reduces_them_in_its_epilogue():
    _, plan, ext = _reduction_forms()
    groups = {g.spec.conv.k: g for g in plan.groups if g.kind == "conv"}
    assert set(groups) == {100, 48, 130, 128} and all(g.spec.conv.kernel == "igemm" for g in groups.values())
    for k, op in ((100, "amin"), (48, "mean"), (128, "amax")):
        red = groups[k].spec.reduction
        assert red is not None and red.over == "channels" and red.op == op and groups[k].outputs == (red.output,)
    assert groups[130].spec.reduction is None and "max_1" not in groups[130].nodes  # two tiles of channels
    assert ext.cuda.count(", 128, 1, ff_conv_igemm::kChannelReduce>(") == 3  # the three reducing launches
    assert groups[128].spec.conv.tiling.nchw and groups[128].spec.conv.tiling.persistent
    assert "reduce_tile" in ext.cuda


def test_the_reducing_tensor_core_forms_plan_passes_the_float64_check_of_its_kernels_against_the_graphs_ops():
    captured, plan, _ = _reduction_forms()
    assert_conv_groups_match_the_graph_in_float64(captured, plan)


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_the_reducing_tensor_core_conv_kernels_compile_for_hopper_without_spills(tmp_path):
    _, _, ext = _reduction_forms()
    report = assert_compiles_for_hopper_without_spills(ext.cuda, tmp_path, max_registers=168)
    assert report.count("conv_igemm_kernel") >= 3
    assert "serialized" not in report


class NormForms(nn.Module):
    """Tensor-core convolutions (TF32) whose output goes into a channel norm, in train mode: 40 -> 64 channels, relu,
    a batch norm with its running statistics; a transposed 3-D one of 24 -> 32 channels, a group norm of 4 groups
    (61's form); 40 -> 48 channels without a bias, an affine instance norm, a division."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(40, 64, 3)
        self.bn = nn.BatchNorm2d(64)
        self.b = nn.ConvTranspose3d(24, 32, 3)
        self.gn = nn.GroupNorm(4, 32)
        self.c = nn.Conv2d(40, 48, 3, bias=False)
        self.inorm = nn.InstanceNorm2d(48, affine=True)

    def forward(self, x, u):
        y = self.bn(torch.relu(self.a(x)))
        z = self.gn(self.b(u))
        w = self.inorm(self.c(x)) / 3.0
        return y, z, w


def _norm_inputs(batch=2):
    return torch.randn(batch, 40, 13, 37), torch.randn(batch, 24, 5, 6, 7)


def _norm_forms(every_kernel=True):
    torch.manual_seed(0)
    captured = _captured(NormForms(), *_norm_inputs(), train=True)
    rewrite(captured.graph, captured)
    _mark(captured, "tf32")
    with mock.patch("fuseforge.families.conv.group.slower_than_cudnn", return_value=None):
        plan = partition(captured.graph, named("rows", "channel_reductions", "channel_norms", "conv"),
                         every_kernel=every_kernel)
    return captured, plan, generate(plan, captured.graph, "norm_forms.py")


def test_by_default_a_tensor_core_conv_leaves_its_channel_norm_to_the_channel_kernels_which_measured_faster():
    _, plan, _ = _norm_forms(every_kernel=False)
    convs = [g for g in plan.groups if g.kind == "conv"]
    assert len(convs) == 3 and all(g.spec.conv.kernel == "igemm" and g.spec.norm is None for g in convs)
    assert sum(g.kind == "channel_norms" for g in plan.groups) == 3
    # the bias adds after the first two convolutions went into their norms' kernels: the plan says so, truly
    why = format_plan(plan).split("# why neighbours were not fused")[1]
    assert why.count("aten.add.Tensor is computed in another kernel, which took it first") == 2
    assert "add.Tensor is not pointwise" not in why


def test_a_tf32_tensor_core_conv_going_into_a_channel_norm_adds_its_statistics_as_it_stores():
    _, plan, ext = _norm_forms()
    normed = {g.spec.conv.k: g for g in plan.groups if g.kind == "conv" and g.spec.norm}
    assert sorted(normed) == [32, 48, 64] and all(g.spec.conv.kernel == "igemm" for g in normed.values())
    assert [normed[k].spec.norm.channel.norm.op for k in (64, 32, 48)] == ["batch_norm", "group_norm",
                                                                          "instance_norm"]
    assert [normed[k].spec.norm.stat_groups for k in (64, 32, 48)] == [0, 4, 48]
    assert normed[32].spec.conv.transposed
    assert ext.cuda.count("ff_conv_igemm::kStoreStats>(") == 3 and "store_tile_stats" in ext.cuda
    assert "channel_norms" not in [g.kind for g in plan.groups]


class WideNorm(nn.Module):
    """A TF32 convolution of 40 -> 130 channels (the rule's tiles of 128 channels: a persistent launch) into a batch
    norm."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(40, 130, 3)
        self.bn = nn.BatchNorm2d(130)

    def forward(self, x):
        return self.bn(self.conv(x))


def test_a_persistent_tf32_conv_going_into_a_channel_norm_is_launched_a_block_a_tile_to_add_its_statistics(tmp_path):
    """The statistics epilogue needs a block a tile (igemm.cuh refuses a persistent one at compile time)."""
    captured = _captured(WideNorm(), torch.randn(2, 40, 13, 37), train=True)
    rewrite(captured.graph, captured)
    _mark(captured, "tf32")
    (conv,) = _convs(captured)
    assert recognise(conv).tiling.persistent  # the rule's instance, as a plain epilogue would launch it
    with mock.patch("fuseforge.families.conv.group.slower_than_cudnn", return_value=None):
        plan = partition(captured.graph, named("rows", "channel_reductions", "channel_norms", "conv"),
                         every_kernel=True)
    (group,) = [g for g in plan.groups if g.kind == "conv"]
    t = group.spec.conv.tiling
    assert group.spec.norm is not None and t.bn == 128 and not t.persistent
    ext = generate(plan, captured.graph, "wide_norm.py")
    assert ext.cuda.count("ff_conv_igemm::kStoreStats>(") == 1
    if NVCC:  # and the statistics launch compiles (a persistent one fails igemm.cuh's static_assert)
        assert_compiles_for_hopper_without_spills(ext.cuda, tmp_path, max_registers=224)


def test_the_tensor_core_norm_forms_plan_passes_the_float64_check_of_its_kernels_against_the_graphs_ops():
    captured, plan, _ = _norm_forms()
    assert_conv_groups_match_the_graph_in_float64(captured, plan)


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_the_tensor_core_conv_kernels_that_take_norm_statistics_compile_for_hopper_without_spills(tmp_path):
    _, _, ext = _norm_forms()
    report = assert_compiles_for_hopper_without_spills(ext.cuda, tmp_path, max_registers=168)
    assert report.count("conv_igemm_kernel") >= 3
    assert "serialized" not in report


@pytest.mark.skipif(GXX is None, reason="needs g++")
def test_the_tensor_core_norm_forms_binding_compiles(tmp_path):
    _, _, ext = _norm_forms()
    result = compile_binding(ext, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]


# ---------------------------------------------------------------------------------------- on a GPU

@pytest.mark.gpu
def test_the_generated_tensor_core_conv_kernels_match_float64_of_their_tf32_operands_on_odd_shapes():
    captured, plan, ext = _forms()
    failures = conv_kernel_failures(captured, plan, ext,
                                    lambda batch: dict(zip(("x", "r", "v", "u"), _forms_inputs(batch))),
                                    tf32_operands=True)
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
def test_the_tensor_core_conv_kernels_with_tiles_of_256_pixels_match_float64_of_their_tf32_operands_on_odd_shapes():
    captured, plan, ext = _forms(256)
    failures = conv_kernel_failures(captured, plan, ext,
                                    lambda batch: dict(zip(("x", "r", "v", "u"), _forms_inputs(batch))),
                                    tf32_operands=True)
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
@pytest.mark.parametrize("pixels", [128, 256])
def test_the_tensor_core_conv_kernels_in_clusters_of_two_match_float64_of_their_tf32_operands_on_odd_shapes(pixels):
    """Batches 1 and 3 give odd numbers of boxes (the last cluster's second block computes no output), and the
    130-channel form two channel tiles (pairs of blocks by channel tile)."""
    captured, plan, ext = _forms(pixels, cluster=2)
    failures = conv_kernel_failures(captured, plan, ext,
                                    lambda batch: dict(zip(("x", "r", "v", "u"), _forms_inputs(batch))),
                                    tf32_operands=True)
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
def test_the_reducing_tensor_core_conv_kernels_match_float64_of_their_tf32_operands_on_odd_shapes():
    captured, plan, ext = _reduction_forms()
    failures = conv_kernel_failures(captured, plan, ext, lambda batch: dict(zip(("x", "u", "v"), _reduction_inputs(batch))),
                                    tf32_operands=True)
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
def test_the_tensor_core_conv_kernels_that_take_norm_statistics_match_float64_of_their_tf32_operands():
    captured, plan, ext = _norm_forms()
    failures = conv_kernel_failures(captured, plan, ext, lambda batch: dict(zip(("x", "u"), _norm_inputs(batch))),
                                    tf32_operands=True)
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------------------------------- the pipeline

def test_optimize_with_a_measured_tf32_conv_emits_a_model_new_whose_tensor_core_kernel_passes_the_float64_check(
        tmp_path, monkeypatch):
    """The CPU stages end to end with eager's class given as the GPU would measure it and the cost choice set aside
    (the H100's prices favour cuDNN channels-last here): the plan keeps its tensor-core conv kernel (no rung of the
    ladder left), the float64 check of the plan passes, the ModelNew calls the kernel."""
    from fuseforge import pipeline
    from fuseforge.config import OptimizeConfig

    real_partition = pipeline.partition

    def partition_measured(graph, *args, **kwargs):
        for node in graph.nodes:
            if igemm_candidate(node):
                node.meta[EAGER_CLASS] = "tf32"
        return real_partition(graph, *args, **kwargs)

    monkeypatch.setattr(pipeline, "partition", partition_measured)
    monkeypatch.setattr("fuseforge.families.conv.group.slower_than_cudnn", lambda *args, **kwargs: None)
    path = next(PROBLEMS.glob("*/52_Conv2d_Activation_BatchNorm.py"))
    run = pipeline.optimize(OptimizeConfig(model_path=path, out_dir=tmp_path, gpu=False))
    assert not run.ladder, run.ladder
    (group,) = [g for g in run.plan.groups if g.kind == "conv"]
    assert group.spec.conv.kernel == "igemm"
    assert run.cpu_check.passed and run.cpu_check.max_rel_error <= 1e-9, run.cpu_check.detail
    assert f"kernels.{group.name}(" in (tmp_path / "40_model_new.py").read_text()


def test_the_report_explains_only_the_conv_kernels_the_plan_uses():
    _, plan, _ = _forms()
    tensor_core = [g for g in plan.groups if g.kind == "conv"]
    direct_plan = _plan(_model("87_Conv2d_Subtract_Subtract_Mish"), "conv")
    direct = [g for g in direct_plan.groups if g.kind == "conv"]
    for groups, used, unused in ((tensor_core, "implicit", "direct"), (direct, "direct", "implicit")):
        how, expected = " ".join(FAMILY.how_for(groups)), " ".join(FAMILY.expected_for(groups))
        assert f"Conv kernels, {used}" in how and f"Conv kernels, {unused}" not in how
        assert expected.startswith(used) and unused not in expected


@pytest.mark.gpu
def test_on_a_gpu_every_candidate_convolution_is_measured_and_marked_with_eagers_class(tmp_path):
    """The real measurement (a child process on the GPU): a broken probe would leave every convolution cuDNN's
    with only a note in the report, which the plan tests above (given the class) cannot see."""
    torch.manual_seed(0)
    captured = _captured(TensorCoreForms(), *_forms_inputs())
    rewrite(captured.graph, captured)
    candidates = [n for n in _convs(captured) if igemm_candidate(n)]
    assert len(candidates) == 3
    assert FAMILY.measure_on_gpu(captured.graph, tmp_path) == []
    assert all(n.meta.get(EAGER_CLASS) in ("tf32", "fp32") for n in candidates)
    assert all(n.meta[CUDNN_MEASURED]["ms_nchw_no_bias"] > 0 for n in _convs(captured))  # cuDNN's times, for the gate


def test_the_family_reads_the_pipelines_measurement_off_the_nodes_and_measures_nothing_twice(tmp_path):
    from fuseforge.layout_precision import put_on_nodes
    captured = _model("52_Conv2d_Activation_BatchNorm")
    rewrite(captured.graph, captured)
    (conv,) = _convs(captured)
    row = {"class": "fp32", "ms_nchw": 3.0, "ms_nchw_no_bias": 2.0}
    put_on_nodes(captured.graph, {conv.name: row})
    with mock.patch("fuseforge.layout_precision.measured") as m:
        assert FAMILY.measure_on_gpu(captured.graph, tmp_path) == []
    m.assert_not_called()
    assert conv.meta[EAGER_CLASS] == "fp32" and conv.meta[CUDNN_MEASURED] is row
