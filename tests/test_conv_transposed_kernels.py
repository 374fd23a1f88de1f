"""Transposed convolutions on tensor cores: a conv_transpose2d/3d that eager's cuDNN runs TF32 (measured on the GPU)
and the pointwise chain after it, as the implicit-GEMM kernel computing each output parity class as a stride-1
convolution (one launch, a block per class's tile).

The identity the kernel rests on (igemm.cuh, `axis_class`): per axis, the outputs o = s q + r of a transposed
convolution of window k, stride s, padding p take the taps t0 + s j (t0 = (r + p) mod s) at inputs q + e - j: an
ordinary stride-1 convolution over q with those taps in reverse and padding taps - 1 - e. Checked here in float64
against torch's own conv_transpose on every parity class, then the plan, the generated code (nvcc, g++), the float64
check of the plan against the graph's ops, and on a GPU the generated kernels against float64 on odd shapes.
"""

import itertools
import types

import pytest
import torch
import torch.nn.functional as F
from compile_check import GXX, NVCC, assert_compiles_for_hopper_without_spills, compile_binding
from conv_group_checks import assert_conv_groups_match_the_graph_in_float64, conv_kernel_failures
from torch import nn

from fuseforge.capture import capture
from fuseforge.codegen import generate
from fuseforge.families import named
from fuseforge.families.conv.group import EAGER_CLASS, conv_op_reason, igemm_candidate, recognise
from fuseforge.families.conv.parity import axis_class
from fuseforge.load import LoadedModel
from fuseforge.partition import partition
from fuseforge.rewrite import rewrite


def _captured(module, *inputs):
    loaded = LoadedModel(path=types.SimpleNamespace(name="t.py", stem="t"), source="", module=None,
                         model=module.eval(), init_args=[], inputs=list(inputs), outputs=[], output_is_tuple=False)
    return capture(loaded)


def _convs(captured):
    return [n for n in captured.graph.nodes if str(n.target).startswith("aten.conv")]


# ---------------------------------------------------------------------------------------- the identity

def _by_parity_classes(x, w, stride, padding, output_padding):
    """conv_transpose2d(x, w) as the kernel computes it: per output parity class (rh, rw) an ordinary stride-1
    correlation of x with the class's taps in reverse, padded by the class's padding (cropped where it is negative),
    written to every s-th output from r."""
    n, c, h, wi = x.shape
    k_out, (kh, kw) = w.shape[1], w.shape[2:]
    oh = (h - 1) * stride[0] - 2 * padding[0] + kh + output_padding[0]
    ow = (wi - 1) * stride[1] - 2 * padding[1] + kw + output_padding[1]
    y = x.new_zeros(n, k_out, oh, ow)
    for rh, rw in itertools.product(range(stride[0]), range(stride[1])):
        a = axis_class(kh, stride[0], padding[0], oh, rh)
        b = axis_class(kw, stride[1], padding[1], ow, rw)
        if not (a.extent and b.extent):
            continue
        taps_h = [a.t0 + stride[0] * (a.taps - 1 - u) for u in range(a.taps)]
        taps_w = [b.t0 + stride[1] * (b.taps - 1 - u) for u in range(b.taps)]
        wc = w[:, :, taps_h][:, :, :, taps_w].transpose(0, 1)  # [K, C, taps_h, taps_w]
        # padding `pad` before and enough after for `extent` outputs; a negative one drops input rows
        def padded(t, dim, pad, taps, extent):
            size = t.shape[dim]
            after = extent + taps - 1 - pad - size
            if pad < 0:
                t, pad = t.narrow(dim, -pad, size + pad), 0
            if after < 0:
                t, after = t.narrow(dim, 0, t.shape[dim] + after), 0
            pads = [0, 0, 0, 0]
            pads[(3 - dim) * 2: (3 - dim) * 2 + 2] = [pad, after]
            return F.pad(t, pads)
        xc = padded(padded(x, 2, a.pad, a.taps, a.extent), 3, b.pad, b.taps, b.extent)
        y[:, :, rh::stride[0], rw::stride[1]] = F.conv2d(xc, wc)
    return y


@pytest.mark.parametrize("k, s, p, op", [(3, 2, 1, 1), (4, 2, 0, 0), (5, 2, 2, 0), (3, 1, 1, 0), (3, 1, 0, 0),
                                         (5, 3, 1, 2), (4, 2, 3, 1), (2, 2, 0, 0)])
def test_each_output_parity_class_of_a_transposed_conv_is_a_stride_1_conv_with_its_taps_reversed(k, s, p, op):
    torch.manual_seed(k * 100 + s * 10 + p)
    x = torch.randn(2, 3, 7, 6, dtype=torch.float64)
    w = torch.randn(3, 4, k, k - 1 if k > s else k, dtype=torch.float64)
    stride, padding, output_padding = (s, s), (p, min(p, w.shape[3] - 1)), (op, op)
    want = F.conv_transpose2d(x, w, stride=stride, padding=padding, output_padding=output_padding)
    got = _by_parity_classes(x, w, stride, padding, output_padding)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_every_tap_of_the_window_falls_in_exactly_one_parity_class():
    for k, s, p in itertools.product(range(1, 7), range(1, 4), range(0, 5)):
        if k < s:
            continue
        taps = sorted(axis_class(k, s, p, 1, r).t0 + s * j for r in range(s) for j in range(axis_class(k, s, p, 1, r).taps))
        assert taps == list(range(k)), (k, s, p, taps)


# ---------------------------------------------------------------------------------------- small forms

class TransposedForms(nn.Module):
    """Transposed convolutions of every parity layout: 2-D 16 -> 130, stride 2, padding 1, output padding 1, then
    relu and a full residual (W a multiple of 4: the NCHW path, persistent, two channel tiles); 2-D 40 -> 33, window 4, stride 2, no padding, odd
    width (channels-last path); 3-D 32 -> 20, window 3, stride 2 (8 classes) with a channel scale; 2-D stride 1
    (one class) with padding past none; 2-D stride (1, 3) window (3, 5), padding (0, 2)."""

    def __init__(self):
        super().__init__()
        self.a = nn.ConvTranspose2d(16, 130, 3, stride=2, padding=1, output_padding=1)
        self.b = nn.ConvTranspose2d(40, 33, 4, stride=2)
        self.c = nn.ConvTranspose3d(32, 20, 3, stride=2, padding=1)
        self.d = nn.ConvTranspose2d(24, 17, 3, padding=1, bias=False)
        self.e = nn.ConvTranspose2d(20, 36, (3, 5), stride=(1, 3), padding=(0, 2))
        self.scale = nn.Parameter(torch.randn(20, 1, 1, 1))

    def forward(self, x, r, v, u, t, q):
        y = torch.relu(self.a(x)) + r
        z = torch.tanh(self.b(v))
        w = torch.sigmoid(self.c(u)) * self.scale
        return y, z, w, self.d(t) * 0.5, self.e(q) - 1.0


def _forms_inputs(batch=2):
    return (torch.randn(batch, 16, 6, 32), torch.randn(batch, 130, 12, 64), torch.randn(batch, 40, 7, 9),
            torch.randn(batch, 32, 4, 6, 5), torch.randn(batch, 24, 9, 13), torch.randn(batch, 20, 6, 7))


def _forms():
    torch.manual_seed(0)
    captured = _captured(TransposedForms(), *_forms_inputs())
    rewrite(captured.graph, captured)
    for node in _convs(captured):
        if igemm_candidate(node):
            node.meta[EAGER_CLASS] = "tf32"
    plan = partition(captured.graph, named("conv"), every_kernel=True)
    return captured, plan, generate(plan, captured.graph, "transposed_forms.py")


def test_every_transposed_form_is_a_tensor_core_conv_kernel_of_output_parity_classes():
    _, plan, ext = _forms()
    groups = {g.spec.conv.k: g for g in plan.groups if g.kind == "conv"}
    assert set(groups) == {130, 33, 20, 17, 36}
    assert all(g.spec.conv.transposed and g.spec.conv.kernel == "igemm" for g in groups.values())
    assert groups[130].spec.conv.output_padding == (0, 1, 1) and groups[130].spec.conv.tiling.nchw
    assert groups[130].spec.conv.tiling.persistent
    assert not groups[33].spec.conv.tiling.nchw and groups[20].spec.conv.dims == 3
    assert ext.cuda.count("ff_conv_igemm::launch_transposed<") == 5
    assert "transposed: its output padding" in ext.binding


def test_the_transposed_forms_plan_passes_the_float64_check_of_its_kernels_against_the_graphs_ops():
    """The plan's reference (each input scattering its window, from the plan's geometry) equals aten's
    conv_transpose and the epilogue in float64: a misread padding, stride or output padding would differ here."""
    captured, plan, _ = _forms()
    assert_conv_groups_match_the_graph_in_float64(captured, plan)


def test_a_transposed_conv_unmeasured_dilated_or_strided_past_its_window_stays_cudnn_and_says_why():
    class Refused(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.ConvTranspose2d(32, 32, 3, stride=2)  # not measured
            self.b = nn.ConvTranspose2d(32, 32, 3, dilation=2)
            self.c = nn.ConvTranspose2d(32, 32, 2, stride=3)
            self.d = nn.ConvTranspose2d(8, 32, 3, stride=2)  # 8 input channels
            self.e = nn.ConvTranspose2d(32, 32, 3, stride=3)  # 9 parity classes

        def forward(self, x):
            return self.a(x), self.b(x), self.c(x), self.d(x[:, :8]), self.e(x)

    captured = _captured(Refused(), torch.randn(1, 32, 8, 8))
    a, b, c, d, e = _convs(captured)
    assert igemm_candidate(a) and "was not measured" in recognise(a)
    assert "dilated transposed convolution" in conv_op_reason(b)
    assert "stride is larger than its window" in conv_op_reason(c)
    assert "9 output parity classes" in conv_op_reason(e)
    from fuseforge.families.conv import IGEMM_KERNEL
    from fuseforge.families.conv.parity import MAX_PARITY_CLASSES
    assert f"constexpr int kMaxParities = {MAX_PARITY_CLASSES};" in IGEMM_KERNEL  # the launch's limit, the same
    d.meta[EAGER_CLASS] = "tf32"
    assert "8 input channels" in conv_op_reason(d)
    a.meta[EAGER_CLASS] = "fp32"  # exact fp32 in eager: the 3xTF32 kernel, priced against cuDNN (tiny here: loses)
    assert recognise(a).tiling.split and conv_op_reason(a).startswith("the tensor-core kernel is expected to take")


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_the_generated_transposed_conv_kernels_compile_for_hopper_without_spills(tmp_path):
    _, _, ext = _forms()
    report = assert_compiles_for_hopper_without_spills(ext.cuda, tmp_path, max_registers=168)
    assert report.count("conv_igemm_kernel") >= 5 and "transposed_weight_kernel" in report
    assert "serialized" not in report


@pytest.mark.skipif(GXX is None, reason="needs g++")
def test_the_generated_transposed_conv_binding_compiles(tmp_path):
    _, _, ext = _forms()
    result = compile_binding(ext, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]


# ---------------------------------------------------------------------------------------- on a GPU

@pytest.mark.gpu
def test_the_generated_transposed_conv_kernels_match_float64_of_their_tf32_operands_on_odd_shapes():
    captured, plan, ext = _forms()
    failures = conv_kernel_failures(captured, plan, ext,
                                    lambda batch: dict(zip(("x", "r", "v", "u", "t", "q"), _forms_inputs(batch))),
                                    tf32_operands=True)
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------------------------------- the cost model

def _problem_conv(name):
    from conftest import PROBLEMS

    from fuseforge.load import load_model_file
    captured = capture(load_model_file(next(PROBLEMS.glob(f"*/{name}.py"))))
    rewrite(captured.graph, captured)
    (conv,) = [n for n in _convs(captured) if igemm_candidate(n)]
    conv.meta[EAGER_CLASS] = "tf32"
    return conv


def test_a_stride_2_transposed_conv_is_priced_at_its_measured_strided_store_rate_and_stays_cudnn():
    """Its parity classes store every second output of a row: an H100 measured the whole kernel at 0.39-0.75 TB/s of
    output (rates.IGEMM_PARITY_STORE_BYTES_PER_S), slower than cuDNN's channels-last call plus the tail's pass on
    every stride-2 problem model; priced by its L2 traffic alone it looked 1.4-4x faster than it ran."""
    from fuseforge import cost, rates
    from fuseforge.families.conv.group import igemm_seconds
    conv = _problem_conv("93_ConvTranspose2d_Add_Min_GELU_Multiply")
    anchor = recognise(conv)
    assert anchor.transposed and anchor.stride == (1, 2, 2)
    store = cost.nbytes(conv) / rates.IGEMM_PARITY_STORE_BYTES_PER_S[16]
    assert igemm_seconds(conv, anchor) >= store
    assert "cuDNN stays" in conv_op_reason(conv)


def test_a_stride_1_transposed_conv_is_one_class_priced_by_its_traffic_and_taken():
    conv = _problem_conv("61_ConvTranspose3d_ReLU_GroupNorm")
    anchor = recognise(conv)
    assert anchor.transposed and anchor.stride == (1, 1, 1) and anchor.kernel == "igemm"
    assert conv_op_reason(conv) is None


# ---------------------------------------------------------------------------------------- without a GPU

def test_every_kernel_without_a_gpu_takes_the_tensor_core_convolutions_as_tf32_and_says_so(tmp_path):
    """`optimize --no-gpu --every-kernel` on a transposed convolution of 32 channels: planned as the tensor-core kernel
    (eager's class assumed, not measured), the plan's float64 check passes, the report's notes say what was assumed;
    without --every-kernel it stays cuDNN's (unmeasured)."""
    from fuseforge import pipeline
    from fuseforge.config import OptimizeConfig
    model = tmp_path / "m.py"
    model.write_text("""
import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(32, 24, 3, stride=2, padding=1, output_padding=1)
    def forward(self, x):
        return torch.tanh(self.up(x))
def get_inputs():
    return [torch.randn(2, 32, 5, 7)]
def get_init_inputs():
    return []
""")
    runs = {}
    for every in (True, False):
        out = tmp_path / f"every_{every}"
        runs[every] = pipeline.optimize(OptimizeConfig(model_path=model, out_dir=out, gpu=False, every_kernel=every))
    (group,) = [g for g in runs[True].plan.groups if g.kind == "conv"]
    assert group.spec.conv.transposed and group.spec.conv.kernel == "igemm"
    assert runs[True].cpu_check.passed, runs[True].cpu_check.detail
    assert any("takes them as TF32-class (not measured)" in n for n in runs[True].notes)
    assert not [g for g in runs[False].plan.groups if g.kind == "conv"]


def test_the_report_says_how_a_transposed_conv_kernel_computes_its_convolution():
    from fuseforge.families.conv import FAMILY
    _, plan, _ = _forms()
    said = {g.spec.conv.k: FAMILY.replaced(g)[1] for g in plan.groups if g.kind == "conv"}
    assert "8 classes in one launch" in said[20] and "4 classes in one launch" in said[130]
    assert "the stride-1 convolution it is (its window's taps in reverse)" in said[17]
