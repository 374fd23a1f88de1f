"""Channel kernels: a train-mode batch norm or a group norm with its pointwise neighbours, as a statistics and
an apply kernel.

Plan tests on tiny modules and on the problem models (what joins, what stays a torch call and why), the
float64 reference against torch's batch norm (outputs and running statistics) and group norm, nvcc and g++ compile checks
of the generated code, and on a GPU the generated kernels against float64 on odd sizes.
"""

import operator
import subprocess
import sys

import pytest
import torch
from compile_check import GXX, NVCC, assert_compiles_for_hopper_without_spills, compile_binding
from conftest import ALL_MODELS, PROBLEMS
from test_partition import _captured
from torch import nn

from fuseforge.codegen import generate
from fuseforge.config import OptimizeConfig
from fuseforge.evaluate.cpu_check import _run_node, run_kernel_reference
from fuseforge.families import named
from fuseforge.families.channel_norms import table as channel_table
from fuseforge.partition import format_plan, partition
from fuseforge.pipeline import optimize
from fuseforge.plan import KernelStep


def _plan(model, *inputs):
    captured = _captured(model, *inputs)
    return captured, partition(captured.graph, named("channel_norms", "channel_reductions"))


def _ops(captured, group):
    by_name = {n.name: n for n in captured.graph.nodes}
    return [str(by_name[n].target).split(".")[1] for n in group.nodes if by_name[n].target is not operator.getitem]


class BiasBatchNormResidual(nn.Module):
    def __init__(self, c=3):
        super().__init__()
        self.bn = nn.BatchNorm2d(c)
        self.bias = nn.Parameter(torch.randn(c, 1, 1))

    def forward(self, x, y):
        return torch.relu(self.bn(x * 0.5 + self.bias) + y) * 2.0


def test_a_batch_norm_with_a_per_channel_prologue_and_a_residual_epilogue_is_one_channel_group():
    captured, plan = _plan(BiasBatchNormResidual(), torch.randn(2, 3, 5, 7), torch.randn(2, 3, 5, 7))
    (group,) = plan.groups
    assert _ops(captured, group) == ["mul", "add", "_native_batch_norm_legit_functional", "add", "relu", "mul"]
    assert dict(group.spec.operands) == {"x": "full", "p_bias": "channel", "p_bn_weight": "channel",
                                            "p_bn_bias": "channel", "b_bn_running_mean": "channel",
                                            "b_bn_running_var": "channel", "y": "full"}
    assert [i for _, i in group.spec.results] == [0, 3, 4]
    assert len(group.outputs) == 3 and {"getitem_3", "getitem_4"} <= set(group.outputs)  # + the final product
    assert sorted(type(s).__name__ for s in plan.steps) == ["KernelStep", "TorchStep"]  # + num_batches_tracked
    assert plan.not_fused == []


def test_without_the_flag_a_batch_norm_stays_a_torch_call_for_the_reason_it_always_had():
    captured = _captured(BiasBatchNormResidual(), torch.randn(2, 3, 5, 7), torch.randn(2, 3, 5, 7))
    plan = partition(captured.graph)
    assert all(g.kind != "channel_norms" for g in plan.groups)
    reasons = {w.reason for w in plan.not_fused if "batch_norm" in w.producer + w.consumer}
    assert reasons == {"aten._native_batch_norm_legit_functional.default is not pointwise (stays a torch call)"}


def test_an_eval_mode_batch_norm_is_no_channel_group():
    model = BiasBatchNormResidual().eval()
    _, plan = _plan(model, torch.randn(2, 3, 5, 7), torch.randn(2, 3, 5, 7))
    assert all(g.kind != "channel_norms" for g in plan.groups)


def test_an_epilogue_input_that_broadcasts_along_a_spatial_axis_stays_apart_and_the_reason_says_so():
    class SpatialBroadcast(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm2d(3)

        def forward(self, x, y):
            return self.bn(x) * y  # y [2, 3, 5, 1]: not per channel

    _, plan = _plan(SpatialBroadcast(), torch.randn(2, 3, 5, 7), torch.randn(2, 3, 5, 1))
    (channel,) = [g for g in plan.groups if g.kind == "channel_norms"]
    assert not any(n.startswith("mul") for n in channel.nodes)
    (why,) = [w for w in plan.not_fused if w.consumer.startswith("mul")]
    assert "broadcasts neither per element, per channel nor as a scalar" in why.reason


def test_two_batch_norms_in_a_row_are_two_channel_groups_and_the_reason_says_one_norm_per_kernel():
    class TwoNorms(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn1, self.bn2 = nn.BatchNorm2d(3), nn.BatchNorm2d(3)

        def forward(self, x):
            return self.bn2(torch.relu(self.bn1(x)))

    _, plan = _plan(TwoNorms(), torch.randn(2, 3, 4, 4))
    groups = [g for g in plan.groups if g.kind == "channel_norms"]
    assert len(groups) == 2 and "relu" in groups[0].nodes
    reasons = [w.reason for w in plan.not_fused if w.producer == "relu"]
    assert len(reasons) == 1 and reasons[0].endswith("a channel kernel holds one norm")


class ConvInstanceNormDivide(nn.Module):
    def __init__(self, affine=False, track_running_stats=False):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.norm = nn.InstanceNorm2d(8, affine=affine, track_running_stats=track_running_stats)

    def forward(self, x):
        return self.norm(self.conv(x)) / 2.0


def test_an_instance_norm_with_its_inputs_statistics_is_a_channel_group_of_one_channel_a_group():
    captured, plan = _plan(ConvInstanceNormDivide(affine=True), torch.randn(2, 3, 10, 10))
    (group,) = plan.groups
    assert group.kind == "channel_norms" and _ops(captured, group) == ["instance_norm", "div"]
    norm = group.spec.norm
    assert (norm.op, norm.groups, norm.weight is not None, norm.bias is not None) == ("instance_norm", 8, True, True)
    assert "instance_norm (statistics per sample and channel)" in format_plan(plan)


def test_an_instance_norm_that_tracks_running_statistics_stays_a_torch_call_and_the_reason_says_so():
    captured, plan = _plan(ConvInstanceNormDivide(track_running_stats=True), torch.randn(2, 3, 10, 10))
    assert not any(g.kind == "channel_norms" for g in plan.groups)
    assert "running statistics" in format_plan(plan)


@pytest.mark.parametrize("shape, affine", [((2, 8, 5, 7), True), ((3, 4, 9), False), ((1, 2, 3, 4, 5), True)])
def test_the_instance_norm_as_a_group_norm_reference_equals_torch_in_float64(shape, affine):
    torch.manual_seed(0)
    v = torch.randn(shape, dtype=torch.float64) * 3 + 1
    c = shape[1]
    w, b = (torch.randn(c, dtype=torch.float64), torch.randn(c, dtype=torch.float64)) if affine else (None, None)
    norm = channel_table.ChannelNorm("instance_norm", "v", "w" if affine else None, "b" if affine else None,
                                     None, None, 0.0, 1e-5, c)
    params = {"w": w, "b": b} if affine else {}
    got = channel_table.reference(norm, v, params)
    assert torch.allclose(got, nn.functional.instance_norm(v, weight=w, bias=b, eps=1e-5), rtol=1e-12, atol=1e-12)


def test_a_batch_norm_without_running_statistics_over_n_c_l_is_a_channel_group_with_one_output():
    class NoStats(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(5, track_running_stats=False)

        def forward(self, x):
            return torch.tanh(self.bn(x))

    _, plan = _plan(NoStats(), torch.randn(4, 5, 3))
    (group,) = plan.groups
    assert group.spec.norm.running_mean is None and group.outputs == ("tanh",)
    assert dict(group.spec.operands) == {"x": "full", "p_bn_weight": "channel", "p_bn_bias": "channel"}


CHANNEL_MODELS = {  # model -> (steps, nodes of the channel group, not-fused pairs)
    # the convolution's bias is a per-channel add (rewrite), the channel kernels' prologue
    "dev/conv2d_batchnorm_relu": (["torch", "torch", "channel_norms", "torch"],
                                  ["add", "_native_batch_norm_legit_functional", "relu"],
                                  [("conv2d", "add"), ("view", "add")]),
    "seed/gemm_scale_batchnorm": (["torch", "channel_norms", "torch"], ["mul", "_native_batch_norm_legit_functional"],
                                  [("linear", "mul")]),
    "dev/conv2d_groupnorm_hardswish": (["torch", "torch", "channel_norms"], ["add", "group_norm", "hardswish"],
                                       [("conv2d", "add"), ("view", "add")]),
    "dev/gemm_groupnorm_swish_multiply": (["torch", "channel_norms"], ["group_norm", "sigmoid", "mul", "mul"],
                                          [("linear", "group_norm")]),
}


@pytest.mark.parametrize("name", list(CHANNEL_MODELS))
def test_a_batch_or_group_norm_model_gets_one_channel_group_and_passes_the_float64_cpu_check(name, tmp_path):
    run = optimize(OptimizeConfig(model_path=PROBLEMS / f"{name}.py", out_dir=tmp_path, gpu=False,
                                  families=frozenset({"channel_norms"})))
    steps, nodes, apart = CHANNEL_MODELS[name]
    assert [s.group.kind if isinstance(s, KernelStep) else "torch" for s in run.plan.steps] == steps
    (group,) = run.plan.groups
    assert _ops(run.captured, group) == nodes
    batch_norm = "batchnorm" in name
    assert ({"getitem_3", "getitem_4"} <= set(group.outputs)) is batch_norm  # the new running statistics
    op = {n.name: n.target.__name__.split(".")[0] for n in run.captured.graph.nodes if n.op == "call_function"}
    assert [(op[w.producer], op[w.consumer]) for w in run.plan.not_fused] == apart
    assert all("not pointwise" in w.reason for w in run.plan.not_fused)
    assert run.cpu_check.passed and run.cpu_check.max_rel_error <= 1e-9, run.cpu_check.detail
    assert any("buffer bn.running_var" in d for d in run.cpu_check.detail) is batch_norm
    assert any(d.startswith("emitted output 0") for d in run.cpu_check.detail)
    assert "channel kernels" in (tmp_path / "40_model_new.py").read_text()
    report = (tmp_path / "report.md").read_text()
    assert f"→ channel kernels `{group.name}`: {'a train-mode' if batch_norm else 'a'}" in report
    # the cost model's line names eager's batch-norm price where the model has one in train mode
    assert ("eager's train-mode batch norm at its cuDNN kernel's three passes" in report) is batch_norm
    form = "- Units of at most 256 values" if group.spec.warp_units else "- Units of more than 256 values"
    assert "- Channel kernels: Welford statistics per unit" in report and form in report


def test_the_command_line_explains_the_channel_norm_switch_and_plans_channel_kernels_by_default(tmp_path):
    def fuseforge(*args):
        return subprocess.run([sys.executable, "-m", "fuseforge", *args], capture_output=True, text=True, timeout=600)

    helped = fuseforge("optimize", "--help")
    assert helped.returncode == 0 and "--no-channel-norms" in helped.stdout
    model = PROBLEMS / "dev" / "conv2d_batchnorm_relu.py"
    result = fuseforge("optimize", str(model), "-o", str(tmp_path), "--no-gpu")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "channel kernels: train-mode batch_norm of add_16" in (tmp_path / "20_partition.txt").read_text()


# models whose channel reductions the flag fuses: their plans are tested in test_channel_reductions.py
CHANNEL_REDUCTION_MODELS = {"conv2d_channelmin_tanh", "conv3d_maxpool_sigmoid_sum"}


@pytest.mark.parametrize("path", [p for p in ALL_MODELS if "BatchNorm" not in p.read_text()
                                  and "GroupNorm" not in p.read_text() and p.stem not in CHANNEL_REDUCTION_MODELS],
                         ids=lambda p: p.stem)
def test_the_channel_flag_changes_nothing_for_a_model_without_batch_or_group_norm_or_channel_reduction(path):
    from fuseforge.load import load_model_file

    captured = _captured_file(path, load_model_file)
    assert format_plan(partition(captured.graph, named("channel_norms", "channel_reductions"))) == format_plan(partition(captured.graph))


def _captured_file(path, load):
    from fuseforge.capture import capture
    from fuseforge.rewrite import rewrite

    captured = capture(load(path))
    rewrite(captured.graph, captured)
    return captured


# ---------------------------------------------------------------------------------------- reference

SHAPES = [(1, 3, 5, 7), (5, 3), (2, 1, 3), (7, 5, 9), (3, 4, 2, 3, 2), (1, 7, 1, 1)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_the_batch_norm_reference_equals_torch_in_float64_outputs_and_running_statistics(shape, affine):
    torch.manual_seed(0)
    c = shape[1]
    v = torch.randn(shape, dtype=torch.float64) * 3 + 1.5
    w, b = torch.randn(c, dtype=torch.float64), torch.randn(c, dtype=torch.float64)
    rm, rv = torch.randn(c, dtype=torch.float64), torch.rand(c, dtype=torch.float64) + 0.5
    norm = channel_table.ChannelNorm("batch_norm", "v", "w" if affine else None, "b" if affine else None,
                                   "rm", "rv", 0.3, 1e-3)
    got = channel_table.reference(norm, v, {"w": w, "b": b, "rm": rm, "rv": rv})
    want = torch.ops.aten._native_batch_norm_legit_functional.default(
        v, w if affine else None, b if affine else None, rm, rv, True, 0.3, 1e-3)
    assert len(got) == len(want) == 5
    for i, (g, e) in enumerate(zip(got, want)):
        if i in (1, 2) and g.shape != e.shape:  # torch may return the saved statistics in another shape
            e = e.reshape(g.shape)
        assert torch.allclose(g, e, rtol=1e-12, atol=1e-12, equal_nan=True), i  # N * HW = 1: NaN variance


@pytest.mark.parametrize("shape", [(1, 6, 5, 7), (5, 6), (2, 6, 3), (3, 6, 1, 1)], ids=str)
@pytest.mark.parametrize("groups", [1, 2, 3, 6])
def test_the_group_norm_reference_equals_torch_in_float64(shape, groups):
    torch.manual_seed(0)
    v = torch.randn(shape, dtype=torch.float64) * 3 + 1.5
    w, b = torch.randn(6, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
    norm = channel_table.ChannelNorm("group_norm", "v", "w", "b", None, None, 0.0, 1e-5, groups)
    got = channel_table.reference(norm, v, {"w": w, "b": b})
    assert torch.allclose(got, nn.functional.group_norm(v, groups, w, b, 1e-5), rtol=1e-12, atol=1e-12)


def test_the_channel_reference_refuses_an_input_that_does_not_fit_its_class():
    captured, plan = _plan(BiasBatchNormResidual(), torch.randn(2, 3, 5, 7), torch.randn(2, 3, 5, 7))
    (group,) = plan.groups
    by_name = {n.name: n for n in captured.graph.nodes}
    inputs = {name: torch.randn(3) for name, cls in group.spec.operands if cls == "channel"}
    inputs.update(x=torch.randn(2, 3, 5, 7), y=torch.randn(2, 3, 5, 7), p_bias=torch.randn(1, 3, 1))
    with pytest.raises(ValueError, match="p_bias"):
        run_kernel_reference(group, by_name, inputs)


# ---------------------------------------------------------------------------------------- compile

class EveryForm(nn.Module):
    """A channel group of every form: planes with a per-channel prologue and a full epilogue input, columns
    ([N, C]), no affine parameters with two full inputs and two full outputs, no running statistics over
    [N, C, L], a 3-d batch norm; group norms over [N, C, H, W] and [N, C]; instance norms (a group norm of one
    channel a group) over [N, C, H, W] with an affine map and over [N, C, L] without."""

    def __init__(self, c=5):
        super().__init__()
        self.bn2d, self.bn1d, self.plain = nn.BatchNorm2d(c), nn.BatchNorm1d(c), nn.BatchNorm2d(c, affine=False)
        self.nostats = nn.BatchNorm1d(c, track_running_stats=False, momentum=0.3)
        self.bn3d = nn.BatchNorm3d(c, eps=1e-3)
        self.bias = nn.Parameter(torch.randn(c, 1, 1))
        self.gn, self.gn_flat = nn.GroupNorm(c, 3 * c), nn.GroupNorm(1, 3 * c, affine=False)
        self.inorm, self.inorm1d = nn.InstanceNorm2d(c, affine=True), nn.InstanceNorm1d(c, eps=1e-3)

    def forward(self, x, y, v, u, t, s, r):
        a = torch.relu(self.bn2d(x * 0.5 + self.bias) + y)
        b = torch.sigmoid(self.bn1d(v * 2.0))
        z = self.plain(x - y)
        c = torch.tanh(self.nostats(u))
        d = nn.functional.gelu(self.bn3d(t))
        e = nn.functional.silu(self.gn(s * 2.0)) + s
        f = torch.relu(self.gn_flat(r))
        g = self.inorm(x + 1.0) / 2.0
        h = self.inorm1d(u) - u
        return a, b, z, z * torch.sigmoid(z), c, d, e, f, g, h


def _every_form():
    inputs = (torch.randn(2, 5, 6, 6), torch.randn(2, 5, 6, 6), torch.randn(4, 5), torch.randn(3, 5, 7),
              torch.randn(2, 5, 3, 4, 4), torch.randn(2, 15, 3, 3), torch.randn(4, 15))
    captured = _captured(EveryForm(), *inputs)
    plan = partition(captured.graph, named("channel_norms", "channel_reductions"))
    return captured, plan, generate(plan, captured.graph, "every_form.py")


def test_every_form_of_the_test_model_is_a_channel_group():
    _, plan, ext = _every_form()
    groups = [g for g in plan.groups if g.kind == "channel_norms"]
    assert len(groups) == 9
    assert sorted(len(g.shape) for g in groups) == [2, 2, 3, 3, 4, 4, 4, 4, 5]
    assert sorted(g.spec.norm.groups for g in groups) == [0, 0, 0, 0, 0, 1, 5, 5, 5]
    assert sorted(g.spec.norm.op for g in groups if g.spec.norm.op == "instance_norm") == ["instance_norm"] * 2
    assert max(sum(c == "full" for _, c in g.spec.operands) for g in groups) == 2
    assert any(len([o for o in g.outputs if o not in g.spec.channel_nodes]) == 2 for g in groups)
    assert ext.cuda.count("(channel kernels:") == 9


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
@pytest.mark.parametrize("std", ["c++17", "c++20"])
def test_the_channel_kernels_compile_for_hopper_without_warnings_or_spills(std, tmp_path):
    _, _, ext = _every_form()
    assert_compiles_for_hopper_without_spills(ext.cuda, tmp_path, std, max_registers=64)


@pytest.mark.skipif(GXX is None, reason="g++ is not installed")
def test_the_channel_kernel_binding_compiles_against_torch_headers(tmp_path):
    _, _, ext = _every_form()
    result = compile_binding(ext, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]


# ---------------------------------------------------------------------------------------- GPU

# (N, C, spatial size): odd and even, N = 1, C odd, HW not a multiple of 4, HW a multiple of 4 (float4 path),
# large enough for several parts per channel
SIZES = [(1, 1, 3), (2, 3, 1), (1, 7, 5), (3, 5, 49), (4, 3, 64), (64, 33, 1), (1, 3, 4096), (9, 5, 1025),
         (64, 16, 1024), (1000, 257, 1), (3, 2, 70001), (2, 37, 300), (2, 16, 16)]


def _full_shape(rank, n, c, hw, groups):
    c = c * groups if groups else c  # group norm: C a multiple of G
    if rank == 2:
        return (n * hw, c)  # columns: the spatial size folds into the batch
    return (n, c, hw) + (1,) * (rank - 3)


def _inputs_for(group, by_name, shape, misaligned, device, far=False):
    """Random inputs of `group` at `shape`. `far` "far": the full-shape ones far from zero next to their spread (3 +-
    1e-4, as a convolution's outputs whose bias outweighs their spread), where statistics taken at the values' scale
    lose the spread. "near-zero": values normalised before (each channel's mean 1e-4 exactly in float64, spread 1),
    the channel operands those of a fresh batch norm (weight 1, bias 0, running mean 0, running variance 1), so that
    the new running mean is 1e-5 and its error is the error of a mean near zero next to the values' spread (the GPU
    fuzz campaign's batch norm of a batch norm's output: a pivot of the spread's size cost it 20x eager's error)."""
    near_zero = far == "near-zero"
    values, c, rank = {}, shape[1], len(shape)
    for name, cls in group.spec.operands:
        if cls == "full":
            size = shape
        elif cls == "channel":
            own = list(by_name[name].meta["val"].shape)
            axis = 1 - (rank - len(own))
            size = (c,) if axis < 0 else tuple(c if i == axis else 1 for i in range(len(own)))
        else:
            size = ()
        n = 1
        for d in size:
            n *= d
        flat = torch.randn(n + 1, device=device) * 2 + 0.5
        if far == "far" and cls == "full":
            flat = 3.0 + (flat - 0.5) * 5e-5
        if "running_var" in name:
            flat = flat.abs() + 0.1
        if near_zero and cls == "full":
            x = torch.randn(shape, dtype=torch.float64, device=device)
            axes = [0] + list(range(2, rank))  # a batch norm's unit: every axis but the channels
            x = x - x.mean(dim=axes, keepdim=True) + 1e-4
            x = x.flatten()  # the values as they are wherever the test reads them, one element in or not
            flat = (torch.cat([x[:1], x]) if misaligned else torch.cat([x, x[:1]])).float()
        elif near_zero and cls == "channel":
            fresh = 1.0 if ("running_var" in name or "weight" in name) else 0.0
            flat = torch.full((n + 1,), fresh, device=device)
        values[name] = (flat[1:] if misaligned and cls == "full" else flat[:n]).view(size)
    return values


def _channels_last(values, group):
    """The full-shape inputs channels-last, as a convolution that ran channels-last returns them."""
    return {k: v.contiguous(memory_format=torch.channels_last) if dict(group.spec.operands)[k] == "full" else v
            for k, v in values.items()}


def _layouts(group, shape):
    """Contiguous and misaligned; channels-last too where the binding takes it as it is (one full-shape
    input, 4-D, more than one channel and position: otherwise the tensor is contiguous as well)."""
    full = [i for i, c in group.spec.operands if c == "full"]
    nhwc = len(full) == 1 and len(shape) == 4 and shape[1] > 1 and shape[2] * shape[3] > 1
    return ["contiguous", "misaligned"] + (["channels-last"] if nhwc else [])


def _rel(got, want):
    diff = (got.double().cpu() - want).nan_to_num(0.0)
    return (diff.norm() / want.nan_to_num(0.0).norm().clamp_min(1e-30)).item()


@pytest.mark.gpu
@pytest.mark.parametrize("far", [False, "far", "near-zero"],
                         ids=["spread-values", "values-far-from-zero-next-to-their-spread",
                              "values-normalised-before-their-mean-near-zero-next-to-their-spread"])
def test_the_generated_channel_kernels_match_float64_on_odd_sizes_like_eager_does(far):
    from torch.utils.cpp_extension import load_inline

    captured, plan, ext = _every_form()
    kernels = load_inline(name=ext.name, cpp_sources=[ext.binding], cuda_sources=[ext.cuda],
                          functions=list(ext.functions), extra_cflags=list(ext.cflags), extra_cuda_cflags=list(ext.nvcc_flags),
                          no_implicit_headers=True)
    by_name = {n.name: n for n in captured.graph.nodes}
    stream = torch.cuda.current_stream().cuda_stream
    failures = []
    for group in [g for g in plan.groups if g.kind == "channel_norms"]:
        for n, c, hw in SIZES:
            shape = _full_shape(len(group.shape), n, c, hw, group.spec.norm.groups)
            for layout in _layouts(group, shape):
                torch.manual_seed(n * 7919 + c * 31 + hw)
                inputs = _inputs_for(group, by_name, shape, layout == "misaligned", "cuda", far)
                if layout == "channels-last":
                    inputs = _channels_last(inputs, group)
                    (full,) = [inputs[i] for i, k in group.spec.operands if k == "full"]
                    assert not full.is_contiguous()
                got = getattr(kernels, group.name)(*[inputs[i] for i in group.inputs], stream)
                got = got if isinstance(got, (list, tuple)) else [got]
                again = getattr(kernels, group.name)(*[inputs[i] for i in group.inputs], stream)
                again = again if isinstance(again, (list, tuple)) else [again]
                truth = run_kernel_reference(group, by_name, {k: v.double().cpu() for k, v in inputs.items()})
                eager = dict(inputs)  # the graph's torch ops in fp32 on the GPU
                for name in group.nodes:
                    eager[name] = _run_node(by_name[name], eager)
                for out, value, repeat in zip(group.outputs, got, again):
                    want = truth[out]
                    ours, theirs = _rel(value, want), _rel(eager[out], want)
                    where = f"{group.name} {list(shape)} {layout} {out}"
                    if tuple(value.shape) != tuple(want.shape) or not ours <= 2 * theirs + 1e-6:
                        failures.append(f"{where}: shape {tuple(value.shape)}, error {ours:.2e} vs eager {theirs:.2e}")
                    if not torch.equal(value, repeat):
                        failures.append(f"{where}: two runs differ (the statistics must be deterministic)")
    assert not failures, "\n".join(failures)
