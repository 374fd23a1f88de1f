"""Channel-reduction and pool kernels: amin/amax/sum/mean over the channel axis and max/avg pools with their
pointwise neighbours, one launch.

Plan tests on tiny modules and on the problem models (what joins, what stays a torch call and why), the
float64 references against torch on odd shapes, nvcc and g++ compile checks of the generated code, and on
a GPU the generated kernels against float64 on odd sizes (DESIGN §3 rule).
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
from fuseforge.families.channel_reductions import pools
from fuseforge.families.channel_reductions import table as reduction_table
from fuseforge.partition import format_plan, partition
from fuseforge.pipeline import optimize
from fuseforge.plan import KernelStep


def _plan(model, *inputs):
    captured = _captured(model, *inputs)
    return captured, partition(captured.graph, named("channel_norms", "channel_reductions"))


def _kind(group) -> str:
    """A channel-reductions group's kind of kernel: `channel-reduction`, or `pool` (a pool and the pointwise ops
    after it); another group's kind."""
    if group.kind != "channel_reductions":
        return group.kind
    return "channel-reduction" if group.spec.reduction else "pool"


def _ops(captured, group):
    by_name = {n.name: n for n in captured.graph.nodes}
    return [str(by_name[n].target).split(".")[1] for n in group.nodes if by_name[n].target is not operator.getitem]


class MinWithNeighbours(nn.Module):
    def __init__(self, c=5):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(c, 1, 1))

    def forward(self, x, r):
        v = torch.min(x * 0.5 + self.bias, dim=1)[0]  # [N, H, W]: keepdim False
        return torch.tanh(v) + r


def test_a_channel_min_with_a_per_channel_prologue_and_a_residual_epilogue_is_one_kernel():
    captured, plan = _plan(MinWithNeighbours(), torch.randn(2, 5, 3, 7), torch.randn(2, 3, 7))
    (group,) = plan.groups
    assert _kind(group) == "channel-reduction"
    assert _ops(captured, group) == ["mul", "add", "min", "tanh", "add"]
    spec = group.spec
    assert spec.reduction.op == "amin" and spec.reduction.keepdim is False and spec.reduction.values == "getitem"
    assert dict(spec.operands) == {"x": "full", "p_bias": "channel", "r": "reduced"}
    assert spec.full_shape[1:] == (5, 3, 7) and spec.out_shape == (spec.full_shape[0], 3, 7)
    assert len(group.outputs) == 1 and group.outputs[0] == group.nodes[-1]
    assert [type(s).__name__ for s in plan.steps] == ["KernelStep"] and plan.not_fused == []


def test_a_min_whose_indices_are_used_stays_a_torch_call_and_the_reason_names_the_indices():
    class Indices(nn.Module):
        def forward(self, x):
            values, indices = torch.min(x, dim=1, keepdim=True)
            return torch.tanh(values), indices

    _, plan = _plan(Indices(), torch.randn(2, 5, 3, 7))
    assert all(g.kind != "channel_reductions" for g in plan.groups)
    (why,) = [w for w in plan.not_fused if w.producer == "min_1"]
    assert why.reason == ("aten.min.dim is not pointwise, nor a channel kernel: the indices of min_1 are used "
                          "(getitem_1): a channel reduction computes the values only")


def test_a_prologue_value_also_read_outside_the_kernel_stays_apart_and_the_reason_says_so():
    class Shared(nn.Module):
        def forward(self, x):
            y = torch.sigmoid(x)
            return y.amax(dim=1, keepdim=True) * 2.0, y

    _, plan = _plan(Shared(), torch.randn(2, 5, 3, 7))
    (group,) = [g for g in plan.groups if g.kind == "channel_reductions"]
    assert "sigmoid" not in group.nodes and group.nodes[-1].startswith("mul")
    (why,) = [w for w in plan.not_fused if w.producer == "sigmoid" and w.consumer == "amax"]
    assert "read outside the kernel" in why.reason


def test_an_epilogue_input_that_broadcasts_along_a_spatial_axis_stays_apart():
    class SpatialBroadcast(nn.Module):
        def forward(self, x, y):
            return x.sum(dim=1, keepdim=True) * y  # y [N, 1, H, 1]: neither per position nor a scalar

    _, plan = _plan(SpatialBroadcast(), torch.randn(2, 5, 3, 7), torch.randn(2, 1, 3, 1))
    (group,) = [g for g in plan.groups if g.kind == "channel_reductions"]
    assert group.nodes == ("sum_1",)
    (why,) = [w for w in plan.not_fused if w.consumer.startswith("mul")]
    assert "does not broadcast as the kernel reads it" in why.reason


@pytest.mark.parametrize("forward, why", [
    (lambda x: x.sum(dim=2, keepdim=True), "reduces another axis"),
    (lambda x: x.amax(dim=(1, 2)), "reduces two axes"),
    (lambda x: x.flatten(2).mean(dim=-1).sum(dim=1), "rank 2: a row reduction"),
], ids=["dim2", "two-dims", "rank2"])
def test_a_reduction_that_is_not_over_the_channel_axis_of_a_spatial_tensor_is_no_channel_kernel(forward, why):
    class Other(nn.Module):
        def forward(self, x):
            return torch.tanh(forward(x))

    captured = _captured(Other(), torch.randn(2, 5, 3, 7))
    flagged = partition(captured.graph, named("channel_norms", "channel_reductions"))
    assert all(g.kind != "channel_reductions" for g in flagged.groups), why
    assert format_plan(flagged) == format_plan(partition(captured.graph))  # reasons unchanged too


CHANNEL_REDUCTION_MODELS = {  # model -> (steps, ops of the channel-reduction kernel, not-fused pairs by op)
    # the convolution's bias is a per-channel add (rewrite): the kernel's prologue adds it, after the pool
    "dev/conv2d_channelmin_tanh": (["torch", "torch", "channel-reduction"], ["add", "min", "tanh", "tanh"],
                                   [("conv2d", "add"), ("view", "add")]),
    "dev/conv3d_maxpool_sigmoid_sum": (["torch", "torch", "channel-reduction"],
                                       ["max_pool3d", "add", "sigmoid", "sum"],
                                       [("conv3d", "max_pool3d"), ("view", "add")]),
}


@pytest.mark.parametrize("name", list(CHANNEL_REDUCTION_MODELS))
def test_a_channel_reduction_model_gets_one_kernel_and_passes_the_float64_cpu_check(name, tmp_path):
    run = optimize(OptimizeConfig(model_path=PROBLEMS / f"{name}.py", out_dir=tmp_path, gpu=False,
                                  families=frozenset({"channel_reductions"})))
    steps, ops, apart = CHANNEL_REDUCTION_MODELS[name]
    assert [_kind(s.group) if isinstance(s, KernelStep) else "torch" for s in run.plan.steps] == steps
    (group,) = run.plan.groups
    assert _ops(run.captured, group) == ops
    op = {n.name: n.target.__name__.split(".")[0] for n in run.captured.graph.nodes if n.op == "call_function"}
    assert [(op[w.producer], op[w.consumer]) for w in run.plan.not_fused] == apart
    assert all("not pointwise (stays a torch call)" in w.reason for w in run.plan.not_fused)
    assert run.cpu_check.passed and run.cpu_check.max_rel_error <= 1e-9, run.cpu_check.detail
    assert any(d.startswith("emitted output 0") for d in run.cpu_check.detail)
    assert "channel-reduction kernel" in (tmp_path / "40_model_new.py").read_text()
    report = (tmp_path / "report.md").read_text()
    assert f"→ {_kind(group)} kernel `{group.name}`: " in report and f"kernels.{group.name}(" in report
    assert "- Channel-reduction and pool kernels: one thread per output position" in report


STRIDED_POOL_THEN_FLATTEN = """import torch
from torch import nn


class Model(nn.Module):  # a window-1 strided max pool: its float64 reference is a strided slice, not contiguous
    def forward(self, x):
        x = nn.functional.max_pool3d(nn.functional.hardtanh(x), 1, stride=2, dilation=2).flatten(1)
        return torch.where(x > 0, x, torch.zeros_like(x)).div(-4.0)  # zeros_like keeps the view apart


def get_inputs():
    return [torch.randn(2, 3, 9, 5, 9)]


def get_init_inputs():
    return []
"""


def test_a_view_after_a_pool_kernel_reads_the_kernels_contiguous_output_in_the_float64_cpu_check(tmp_path):
    """Every generated kernel writes contiguous outputs; the plan's float64 run must too, or a view after a
    kernel whose reference is a strided slice raised there and the ladder left the plan (`fuseforge fuzz --seed
    61034`, minimised)."""
    source = tmp_path / "m.py"
    source.write_text(STRIDED_POOL_THEN_FLATTEN)
    run = optimize(OptimizeConfig(model_path=source, out_dir=tmp_path / "out", gpu=False))
    assert not (tmp_path / "out" / "attempts").exists()  # the first plan was kept
    assert run.cpu_check.passed, run.cpu_check.detail
    assert any(_kind(g) == "pool" for g in run.plan.groups)


class PoolThenPointwise(nn.Module):
    def forward(self, x):
        return torch.relu(nn.functional.max_pool2d(x, 3, 2, 1, ceil_mode=True)) * 2.0


def test_a_pool_with_pointwise_ops_after_it_and_no_reduction_is_one_pool_kernel():
    captured, plan = _plan(PoolThenPointwise(), torch.randn(2, 3, 7, 9))
    (group,) = plan.groups
    assert _kind(group) == "pool" and _ops(captured, group) == ["max_pool2d", "relu", "mul"]
    spec = group.spec
    assert spec.reduction is None and dict(spec.operands) == {"x": "pooled"}
    assert (spec.pool.kernel, spec.pool.stride, spec.pool.padding, spec.pool.ceil_mode) == ((3, 3), (2, 2), (1, 1), True)
    assert spec.full_shape[1:] == (3, 4, 5) and plan.not_fused == []


def test_a_max_pool_whose_indices_are_unused_joins_and_one_whose_indices_are_used_stays():
    class Indices(nn.Module):
        def __init__(self, use):
            super().__init__()
            self.use = use

        def forward(self, x):
            values, indices = nn.functional.max_pool2d(x, 2, return_indices=True)
            out = values.sum(dim=1, keepdim=True)
            return (out, indices) if self.use else out

    _, unused = _plan(Indices(False), torch.randn(2, 3, 6, 6))
    (group,) = unused.groups
    assert group.spec.pool.values is not None and _kind(group) == "channel-reduction"
    _, used = _plan(Indices(True), torch.randn(2, 3, 6, 6))
    assert all(g.kind != "channel_reductions" or g.spec.pool is None for g in used.groups)
    (why,) = [w for w in used.not_fused if w.consumer.startswith("sum")]
    assert "the indices of max_pool2d_with_indices are used" in why.reason


def test_a_pointwise_op_before_a_pool_joins_it_unless_the_windows_overlap_more_than_four_fold():
    class Before(nn.Module):
        def __init__(self, kernel, stride):
            super().__init__()
            self.kernel, self.stride = kernel, stride

        def forward(self, x):
            return torch.tanh(nn.functional.avg_pool2d(torch.relu(x), self.kernel, self.stride))

    _, plan = _plan(Before(2, 2), torch.randn(2, 3, 6, 6))
    (pool,) = [g for g in plan.groups if g.kind == "channel_reductions"]
    assert [n for n in pool.nodes if n.startswith("relu")] == list(pool.spec.window_nodes)
    assert dict(pool.spec.operands) == {"x": "pooled"}
    _, apart = _plan(Before(3, 1), torch.randn(2, 3, 6, 6))  # 3x3 windows at stride 1: each value in 9 windows
    (pool,) = [g for g in apart.groups if g.kind == "channel_reductions"]
    assert not any(n.startswith("relu") for n in pool.nodes) and pool.spec.window_nodes == ()
    (why,) = [w for w in apart.not_fused if w.producer.startswith("relu")]
    assert "windows that overlap 9-fold" in why.reason


def test_a_value_before_a_pool_that_is_also_read_elsewhere_stays_apart_from_the_pool():
    class Shared(nn.Module):
        def forward(self, x):
            y = torch.relu(x)
            return torch.tanh(nn.functional.max_pool2d(y, 2)), y * 2.0

    _, plan = _plan(Shared(), torch.randn(2, 3, 6, 6))
    (pool,) = [g for g in plan.groups if g.kind == "channel_reductions"]
    assert pool.spec.window_nodes == () and not any(n.startswith("relu") for n in pool.nodes)


def test_a_pool_without_a_pointwise_op_after_it_stays_pytorchs_kernel():
    class Alone(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(12, 4)

        def forward(self, x):
            return self.fc(nn.functional.max_pool2d(x, 2).flatten(1))

    captured = _captured(Alone(), torch.randn(2, 3, 4, 4))
    flagged = partition(captured.graph, named("channel_norms", "channel_reductions"))
    assert all(g.kind != "channel_reductions" for g in flagged.groups)
    assert [s.node for s in flagged.steps] == [s.node for s in partition(captured.graph).steps]


@pytest.mark.parametrize("conv, pool, x", [
    (nn.Conv2d(3, 6, 3), lambda v: nn.functional.max_pool2d(v, 2), torch.randn(2, 3, 9, 9)),
    (nn.ConvTranspose3d(3, 4, 3, stride=2), lambda v: nn.functional.max_pool3d(v, 2), torch.randn(2, 3, 4, 4, 4))])
def test_a_pool_alone_after_a_convolution_is_a_pool_kernel_so_that_the_convolution_runs_channels_last(conv, pool, x):
    from fuseforge.families import FAMILIES
    from fuseforge.layout import channels_last_convs

    class ConvPoolMean(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = conv

        def forward(self, x):  # the pool's only neighbour is taken by a row kernel (the mean)
            return torch.tanh(pool(self.conv(x)).mean(dim=tuple(range(2, x.dim()))))

    captured = _captured(ConvPoolMean(), x)
    plan = partition(captured.graph, FAMILIES)
    (alone,) = [g for g in plan.groups if g.kind == "channel_reductions"]
    assert _kind(alone) == "pool" and len(_ops(captured, alone)) == 1 and alone.spec.window_nodes == ()
    (conv_node,) = [n.name for n in captured.graph.nodes if n.name.startswith("conv")]
    assert dict(alone.spec.operands) == {conv_node: "pooled"}
    assert channels_last_convs(plan, captured.graph) == {conv_node}


def test_the_command_line_plans_the_channel_min_model_as_one_channel_reduction_kernel(tmp_path):
    model = PROBLEMS / "dev" / "conv2d_channelmin_tanh.py"
    result = subprocess.run([sys.executable, "-m", "fuseforge", "optimize", str(model), "-o", str(tmp_path),
                             "--no-gpu"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    plan = (tmp_path / "20_partition.txt").read_text()
    assert "kernel fused_add_min_tanh: add_25 -> min_1 -> getitem -> tanh -> tanh_1" in plan
    assert "channel-reduction kernel: amin of add_25 over axis 1 of ['s77', 64, 254, 254] -> ['s77', 1, 254, 254]" \
        in plan
    assert "torch  conv2d_1  (channels-last input and weight: its readers read NHWC)" in plan


FLAG_OFF = {  # the plans without kernel families (the convolution's bias split off by the rewrite stage)
    "dev/conv2d_channelmin_tanh": (
        "# steps, in execution order\ntorch  conv2d_1\ntorch  view\nkernel fused_add: add_25\n"
        "    reads conv2d_1, view; writes add_25; iteration shape ['s77', 64, 254, 254]\ntorch  min_1\n"
        "torch  getitem\nkernel fused_tanh: tanh -> tanh_1\n"
        "    reads getitem; writes tanh_1; iteration shape ['s77', 1, 254, 254]\n\n# why neighbours were not fused\n"
        "conv2d_1 -> add_25: aten.conv2d.default is not pointwise (stays a torch call)\n"
        "view -> add_25: aten.view.default is not pointwise (stays a torch call)\n"
        "add_25 -> min_1: aten.min.dim is not pointwise (stays a torch call)\n"
        "min_1 -> tanh: aten.min.dim is not pointwise (stays a torch call)\n"),
    "dev/conv3d_maxpool_sigmoid_sum": (
        "# steps, in execution order\ntorch  conv3d_1\ntorch  view\ntorch  max_pool3d_1\n"
        "kernel fused_add_sigmoid: add_25 -> sigmoid\n"
        "    reads max_pool3d_1, view; writes sigmoid; iteration shape ['s77', 16, 8, 32, 32]\ntorch  sum_1\n\n"
        "# why neighbours were not fused\n"
        "max_pool3d_1 -> add_25: aten.max_pool3d.default is not pointwise (stays a torch call)\n"
        "view -> add_25: aten.view.default is not pointwise (stays a torch call)\n"
        "sigmoid -> sum_1: aten.sum.dim_IntList is not pointwise (stays a torch call)\n"),
}


def _captured_file(path):
    from fuseforge.capture import capture
    from fuseforge.load import load_model_file
    from fuseforge.rewrite import rewrite

    captured = capture(load_model_file(path))
    rewrite(captured.graph, captured)
    return captured


@pytest.mark.parametrize("path", ALL_MODELS, ids=lambda p: p.stem)
def test_without_the_flag_no_plan_has_a_channel_reduction_kernel_or_mentions_one(path):
    plan = partition(_captured_file(path).graph)
    assert all(g.kind != "channel_reductions" for g in plan.groups)
    assert not any("channel" in w.reason for w in plan.not_fused)
    name = f"{path.parent.name}/{path.stem}"
    if name in FLAG_OFF:
        assert format_plan(plan) == FLAG_OFF[name]


# ---------------------------------------------------------------------------------------- reference

SHAPES = [(1, 1, 1), (1, 3, 5), (2, 7, 3, 5), (3, 5, 7, 1, 3), (1, 4, 4), (2, 33, 9, 9)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op", ["amin", "amax", "sum", "mean"])
@pytest.mark.parametrize("keepdim", [True, False])
def test_the_channel_reduction_reference_equals_torch_in_float64(shape, op, keepdim):
    torch.manual_seed(0)
    v = torch.randn(shape, dtype=torch.float64) * 3 + 0.5
    got = reduction_table.reference(reduction_table.ChannelReduction(op, "v", keepdim), v)
    want = getattr(torch, op)(v, dim=1, keepdim=keepdim)
    assert got.shape == want.shape and torch.allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op", ["amin", "amax", "sum", "mean"])
def test_a_nan_in_any_channel_gives_nan_in_the_reference_as_in_torch(op):
    v = torch.randn(2, 5, 3, 3, dtype=torch.float64)
    v[1, 3, 2, 1] = float("nan")
    got = reduction_table.reference(reduction_table.ChannelReduction(op, "v", True), v)
    want = torch.min(v, dim=1, keepdim=True)[0] if op == "amin" else getattr(torch, op)(v, dim=1, keepdim=True)
    assert torch.equal(torch.isnan(got), torch.isnan(want)) and torch.isnan(got).sum() == 1


def test_the_channel_reduction_reference_refuses_an_input_that_does_not_fit_its_class():
    captured, plan = _plan(MinWithNeighbours(), torch.randn(2, 5, 3, 7), torch.randn(2, 3, 7))
    (group,) = plan.groups
    by_name = {n.name: n for n in captured.graph.nodes}
    inputs = {"x": torch.randn(2, 5, 3, 7), "p_bias": torch.randn(5, 1, 1), "r": torch.randn(2, 1, 3, 7)}
    with pytest.raises(ValueError, match="input r"):
        run_kernel_reference(group, by_name, inputs)


def _pool(op, dims, k, s, p, d=1, ceil=False, include=True, override=None):
    return pools.Pool(op, "v", (k,) * dims, (s,) * dims, (p,) * dims, (d,) * dims, ceil, include, override)


POOLS = [  # (op, dims, kernel, stride, padding, dilation, ceil_mode, count_include_pad, divisor_override)
    ("max", 2, 2, 2, 0, 1, False, True, None), ("max", 2, 3, 2, 1, 1, True, True, None),
    ("max", 2, 3, 1, 1, 2, False, True, None), ("max", 3, 2, 2, 0, 1, True, True, None),
    ("max", 3, 3, 2, 1, 1, True, True, None), ("avg", 2, 3, 2, 1, 1, True, True, None),
    ("avg", 2, 3, 2, 1, 1, True, False, None), ("avg", 2, 2, 3, 1, 1, True, False, None),
    ("avg", 2, 3, 2, 0, 1, False, True, 5), ("avg", 3, 3, 2, 1, 1, True, False, None),
    ("avg", 3, 2, 1, 1, 1, False, True, None), ("max", 1, 3, 2, 1, 2, True, True, None),
    ("max", 1, 2, 2, 0, 1, False, True, None), ("avg", 1, 3, 2, 1, 1, True, False, None),
    ("avg", 1, 4, 3, 2, 1, True, True, None),
]


@pytest.mark.parametrize("shape", [(1, 1, 7, 5, 6), (2, 3, 8, 9, 4), (1, 5, 3, 3, 3)], ids=str)
@pytest.mark.parametrize("args", POOLS, ids=str)
def test_the_pool_reference_equals_torch_in_float64_with_padding_dilation_and_ceil_mode(shape, args):
    op, dims, k, s, p, d, ceil, include, override = args
    torch.manual_seed(0)
    v = torch.randn(shape[:dims + 2], dtype=torch.float64) * 3
    pool = _pool(op, dims, k, s, p, d, ceil, include, override)
    got = pools.reference(pool, v)
    fn = getattr(nn.functional, f"{op}_pool{dims}d")
    override_arg = {} if dims == 1 else {"divisor_override": override}  # avg_pool1d has no divisor_override
    want = fn(v, k, s, p, d, ceil_mode=ceil) if op == "max" else \
        fn(v, k, s, p, ceil_mode=ceil, count_include_pad=include, **override_arg)
    assert got.shape == want.shape and torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    assert list(got.shape[2:]) == [pools.out_size(pool, a, n) for a, n in enumerate(shape[2:dims + 2])]


def test_a_nan_in_a_window_gives_nan_in_the_max_pool_reference_as_in_torch():
    v = torch.randn(1, 2, 5, 5, dtype=torch.float64)
    v[0, 1, 2, 3] = float("nan")
    got = pools.reference(_pool("max", 2, 3, 2, 1, ceil=True), v)
    want = nn.functional.max_pool2d(v, 3, 2, 1, ceil_mode=True)
    assert torch.equal(torch.isnan(got), torch.isnan(want)) and torch.isnan(got).sum() > 0


# ---------------------------------------------------------------------------------------- compile

class EveryReduction(nn.Module):
    """A channel-reduction kernel of every form: min.dim values with a per-channel prologue and a residual
    epilogue (keepdim False), max.dim values, amin/amax with a negative dim, a sum of two full inputs over
    [N, C, L], a mean over [N, C, D, H, W] with two outputs."""

    def __init__(self, c=5):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(c, 1, 1))

    def forward(self, x, r, y, z, t):
        a = torch.tanh(torch.min(x * 0.5 + self.bias, dim=1)[0]) + r
        b = torch.relu(torch.max(x, dim=1, keepdim=True)[0])
        c = torch.sigmoid(torch.amin(x - 1.0, dim=-3, keepdim=True))
        d = (y * z).sum(dim=1)
        m = t.mean(dim=1, keepdim=True)
        return a, b, c, d * 2.0, m, torch.exp(m)


class EveryPool(nn.Module):
    """A pool in every form: max_pool3d -> sigmoid -> channel sum (the dev model's form), an average pool with
    padding, ceil_mode and count_include_pad=False before a channel amax, a max pool with padding and dilation
    before a mean with a per-channel prologue, a 1-D max pool with padding, dilation and ceil_mode before a
    channel sum; pool kernels: a max pool with ceil_mode and a full input of the pooled shape, an average pool
    with divisor_override and two outputs, a 1-D average pool with count_include_pad=False. Window prologues
    (pointwise ops before the pool, computed per window element): a max pool kernel of a chain with a
    per-channel operand and a scalar, an overlapping average pool with padding and ceil_mode before a channel
    sum, a 3-D average pool kernel of a sigmoid with nothing after it. A pool alone of a convolution's output (a
    pool kernel with no pointwise op)."""

    def __init__(self, c=3):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(c, 1, 1))
        self.weight = nn.Parameter(torch.randn(c, c, 1, 1))

    def forward(self, x, v, y, w, u):
        a = torch.sigmoid(nn.functional.max_pool3d(x, 2)).sum(dim=1, keepdim=True)
        b = nn.functional.avg_pool2d(v, 3, 2, 1, ceil_mode=True, count_include_pad=False).amax(dim=1)
        c = (nn.functional.max_pool2d(v, 3, 1, 1, dilation=2) * self.scale).mean(dim=1, keepdim=True)
        e = torch.relu(nn.functional.max_pool2d(v, 2, ceil_mode=True) + y)
        f = nn.functional.avg_pool3d(w, 2, 1, 1, divisor_override=3)
        g = torch.tanh(nn.functional.max_pool1d(u, 3, 2, 1, dilation=2, ceil_mode=True)).sum(dim=1)
        h = torch.relu(nn.functional.avg_pool1d(u, 3, 2, 1, ceil_mode=True, count_include_pad=False))
        p = torch.relu(nn.functional.max_pool2d(torch.tanh(v * self.scale - 0.5), 2))
        q = nn.functional.avg_pool2d(torch.relu(y * 1.5 + 1.0), 3, 2, 1, ceil_mode=True).sum(dim=1)
        r = nn.functional.avg_pool3d(torch.sigmoid(w), 2)
        s = nn.functional.max_pool2d(nn.functional.conv2d(y, self.weight), 3, 2, 1)
        return a, b, c, e, torch.tanh(f), f, g, h, p, q, r, s


def _every_reduction():
    inputs = (torch.randn(2, 5, 6, 6), torch.randn(2, 6, 6), torch.randn(3, 4, 7), torch.randn(3, 4, 7),
              torch.randn(2, 3, 3, 4, 4))
    captured = _captured(EveryReduction(), *inputs)
    plan = partition(captured.graph, named("channel_norms", "channel_reductions"))
    return captured, plan, generate(plan, captured.graph, "every_reduction.py")


def _every_pool():
    inputs = (torch.randn(2, 3, 4, 6, 6), torch.randn(2, 3, 7, 9), torch.randn(2, 3, 4, 5), torch.randn(2, 3, 3, 4, 5),
              torch.randn(2, 3, 11))
    captured = _captured(EveryPool(), *inputs)
    plan = partition(captured.graph, named("channel_norms", "channel_reductions"))
    return captured, plan, generate(plan, captured.graph, "every_pool.py")


def test_every_form_of_the_test_model_is_a_channel_reduction_kernel():
    _, plan, ext = _every_reduction()
    groups = [g for g in plan.groups if g.kind == "channel_reductions"]
    assert len(groups) == len(plan.groups) == 5
    assert sorted(g.spec.reduction.op for g in groups) == ["amax", "amin", "amin", "mean", "sum"]
    assert sorted(len(g.outputs) for g in groups) == [1, 1, 1, 1, 2]
    assert {c for g in groups for _, c in g.spec.operands} == {"full", "channel", "reduced"}
    assert ext.cuda.count("(channel-reduction kernel)") == 5


def test_every_form_of_the_pool_test_model_is_a_pool_or_channel_reduction_kernel():
    captured, plan, ext = _every_pool()
    assert sorted(_kind(g) for g in plan.groups) == ["channel-reduction"] * 5 + ["pool"] * 6
    assert all(g.spec.pool for g in plan.groups)
    assert sorted((g.spec.pool.op, g.spec.pool.dims) for g in plan.groups) == \
        [("avg", 1), ("avg", 2), ("avg", 2), ("avg", 3), ("avg", 3), ("max", 1), ("max", 2), ("max", 2), ("max", 2),
         ("max", 2), ("max", 3)]
    assert {c for g in plan.groups for _, c in g.spec.operands} == {"pooled", "full", "channel"}
    assert sorted(len(g.outputs) for g in plan.groups) == [1] * 10 + [2]
    assert ext.cuda.count("(pool kernel)") == 6 and ext.cuda.count("(channel-reduction kernel)") == 5
    (alone,) = [g for g in plan.groups if len(g.nodes) == 1]  # the pool of the convolution's output, nothing else
    assert _ops(captured, alone) == ["max_pool2d"]
    # the window prologues: each chain before its pool is computed per window element, never written
    assert sorted(len(g.spec.window_nodes) for g in plan.groups) == [0] * 8 + [1, 3, 3]
    assert ext.cuda.count("const float ff_raw = ") == 3


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
@pytest.mark.parametrize("std", ["c++17", "c++20"])
# kernels: reductions, 5 groups of 4 or 1 positions per thread, and the 4 with one full input a channels-last
# kernel too (14); pools, 5 channel reductions reading a contiguous or a channels-last pool input (10) and 6 pool
# kernels reading a contiguous one or a channels-last one, by element or by tile (18)
@pytest.mark.parametrize("build, kernels", [(_every_reduction, 14), (_every_pool, 28)], ids=["reductions", "pools"])
def test_the_channel_reduction_kernels_compile_for_hopper_without_warnings_or_spills(std, build, kernels, tmp_path):
    _, _, ext = build()
    report = assert_compiles_for_hopper_without_spills(ext.cuda, tmp_path, std, max_registers=64)
    assert sum("spill" in line for line in report.splitlines()) == kernels


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_a_pool_kernel_with_more_outputs_than_the_channels_last_tile_stages_keeps_one_thread_per_element(tmp_path):
    class ManyOutputs(nn.Module):  # 12 outputs: the tile kernel would stage 12 x 4.1 KB of static shared memory,
        # past the 48 KB a block gets without opting in (ptxas builds it; the launch would fail)
        def forward(self, x):
            p = nn.functional.max_pool2d(torch.tanh(x), 2)
            return tuple(p * float(k + 1) for k in range(12))

    captured = _captured(ManyOutputs(), torch.randn(2, 3, 8, 8))
    plan = partition(captured.graph, named("channel_norms", "channel_reductions"))
    (group,) = [g for g in plan.groups if g.kind == "channel_reductions"]
    assert group.spec.reduction is None and len(group.outputs) == 12
    ext = generate(plan, captured.graph, "many_outputs.py")
    report = assert_compiles_for_hopper_without_spills(ext.cuda, tmp_path, "c++17", max_registers=64)
    assert "ff_pool_nhwc_kernel" not in report  # only the one-thread-per-element kernels are instantiated


@pytest.mark.skipif(GXX is None, reason="g++ is not installed")
@pytest.mark.parametrize("build", [_every_reduction, _every_pool], ids=["reductions", "pools"])
def test_the_channel_reduction_binding_compiles_against_torch_headers(build, tmp_path):
    _, _, ext = build()
    result = compile_binding(ext, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]


# ---------------------------------------------------------------------------------------- GPU

# (N, C, S): N = 1, C = 1 and odd, S odd, S a multiple of 4 (float4 path), C not a multiple of 4 (the
# channel loop's tail), large enough for several blocks per sample
SIZES = [(1, 1, 1), (2, 3, 1), (1, 7, 5), (3, 5, 49), (4, 3, 64), (1, 64, 4096), (9, 5, 1025), (2, 257, 3),
         (64, 16, 1024), (3, 6, 70001)]
# pools: (N, C, spatial sizes of the pool's input): odd and even, N = 1, C = 1, windows past the edges
POOL_SIZES = {1: [(1, 1, (5,)), (2, 3, (9,)), (3, 17, (1001,)), (4, 16, (4096,))],
              2: [(1, 1, (5, 5)), (2, 3, (7, 9)), (3, 5, (8, 6)), (1, 17, (33, 31)), (4, 16, (64, 64))],
              3: [(1, 1, (3, 4, 5)), (2, 3, (5, 7, 9)), (2, 16, (16, 64, 64))]}


def _channel_size(node, shape):
    """A per-channel operand at its traced rank, with C on the axis that lands on axis 1 of `shape`."""
    own = list(node.meta["val"].shape)
    axis = 1 - (len(shape) - len(own))
    return (shape[1],) if axis < 0 else tuple(shape[1] if i == axis else 1 for i in range(len(own)))


def _cases(group):
    """(pooled input shape or None, full shape F) for every size the GPU test runs `group` at."""
    spec = group.spec
    if spec.pool is None:
        return [(None, (n, c, s) + (1,) * (len(group.shape) - 3)) for n, c, s in SIZES]
    return [((n, c, *spatial), (n, c, *[pools.out_size(spec.pool, a, x) for a, x in enumerate(spatial)]))
            for n, c, spatial in POOL_SIZES[spec.pool.dims]]


def _gpu_inputs(group, by_name, pooled, shape, misaligned, nan, device="cuda"):
    spec, values = group.spec, {}
    red = spec.reduction
    out = shape if red is None else (shape[0], 1, *shape[2:]) if red.keepdim else (shape[0], *shape[2:])
    for name, cls in spec.operands:
        size = {"full": shape, "reduced": out, "scalar": (), "pooled": pooled}.get(cls) or \
            _channel_size(by_name[name], shape)
        count = 1
        for d in size:
            count *= d
        flat = torch.randn(count + 1, device=device) * 2 + 0.5
        values[name] = (flat[1:] if misaligned and cls in ("full", "reduced", "pooled") else flat[:count]).view(size)
    if nan:
        first = next(name for name, cls in spec.operands if cls in ("full", "pooled"))
        values[first].view(-1)[values[first].numel() // 2] = float("nan")
    return values


def _channels_last(t):
    """t in NHWC (NDHWC) memory order, same values; 4-D and 5-D tensors only."""
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(t.dim())
    return t.contiguous(memory_format=fmt) if fmt else t


def _rel(got, want):
    diff = (got.double().cpu() - want).nan_to_num(0.0)
    return (diff.norm() / want.nan_to_num(0.0).norm().clamp_min(1e-30)).item()


@pytest.mark.gpu
@pytest.mark.parametrize("build", [_every_reduction, _every_pool], ids=["reductions", "pools"])
def test_the_generated_channel_reduction_kernels_match_float64_on_odd_sizes_like_eager_does(build):
    from torch.utils.cpp_extension import load_inline

    captured, plan, ext = build()
    kernels = load_inline(name=ext.name, cpp_sources=[ext.binding], cuda_sources=[ext.cuda],
                          functions=list(ext.functions), extra_cflags=list(ext.cflags), extra_cuda_cflags=list(ext.nvcc_flags),
                          no_implicit_headers=True)
    by_name = {n.name: n for n in captured.graph.nodes}
    stream = torch.cuda.current_stream().cuda_stream
    failures = []
    for group in plan.groups:
        for pooled, shape in _cases(group):
            for misaligned, nan, nhwc in ((False, False, False), (True, False, False), (False, True, False),
                                          (False, False, True), (False, True, True)):
                torch.manual_seed(sum(shape) * 7919 + len(shape))
                inputs = _gpu_inputs(group, by_name, pooled, shape, misaligned, nan)
                if nhwc:  # a channels-last convolution's output: the kernel reads it in NHWC order
                    inputs = {k: _channels_last(v) if dict(group.spec.operands)[k] in ("full", "pooled")
                              else v for k, v in inputs.items()}
                got = getattr(kernels, group.name)(*[inputs[i] for i in group.inputs], stream)
                got = got if isinstance(got, (list, tuple)) else [got]
                truth = run_kernel_reference(group, by_name, {k: v.double().cpu() for k, v in inputs.items()})
                eager = dict(inputs)  # the graph's torch ops in fp32 on the GPU
                for name in group.nodes:
                    eager[name] = _run_node(by_name[name], eager)
                for out, value in zip(group.outputs, got):
                    want = truth[out]
                    ours, theirs = _rel(value, want), _rel(eager[out], want)
                    where = f"{group.name} {list(pooled or shape)} misaligned={misaligned} nan={nan} nhwc={nhwc} {out}"
                    if tuple(value.shape) != tuple(want.shape) or not ours <= 2 * theirs + 1e-6:
                        failures.append(f"{where}: shape {tuple(value.shape)}, error {ours:.2e} vs eager {theirs:.2e}")
                    if not torch.equal(torch.isnan(value).cpu(), torch.isnan(want)):
                        failures.append(f"{where}: NaN where float64 has none, or the reverse")
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------------------------------- host emulation

HOST_LOOPS = r"""
// Test harness: the kernels' loops on the host, over the same Op structs (their FF_HD member functions).
template <class Op>
int host_cred_launch(const Op& op, FFCredDims d, void*) {
    for (int64_t n = 0; n < d.batch; ++n) {
        for (int64_t s = 0; s < d.positions; ++s) {
            FFPoolWindow window{};
            if constexpr (Op::kPool) window = op.window(d, s);
            float acc = Op::init();
            for (int c = 0; c < (int)d.channels; ++c) {
                float in[FFCredFull<Op>::kSize] = {};
                for (int f = 0; f < Op::kFull; ++f) in[f] = op.full[f][(n * d.channels + c) * d.positions + s];
                float pooled = 0.0f;
                if constexpr (Op::kPool) pooled = op.pool(op.pooled + (n * d.channels + c) * d.in_positions, d, window, c);
                acc = Op::combine(acc, op.reduced(in, c, pooled));
            }
            float o[Op::kOut];
            op.element(acc, (int)d.channels, n * d.positions + s, o);
            for (int m = 0; m < Op::kOut; ++m) op.out[m][n * d.positions + s] = o[m];
        }
    }
    return 0;
}

template <class Op>
int host_pool_launch(const Op& op, FFCredDims d, void*) {
    for (int64_t i = 0; i < d.batch * d.channels * d.positions; ++i) {
        const int64_t plane = i / d.positions, s = i % d.positions;
        float in[FFCredFull<Op>::kSize] = {};
        for (int f = 0; f < Op::kFull; ++f) in[f] = op.full[f][i];
        const float pooled = op.pool(op.pooled + plane * d.in_positions, d, op.window(d, s), (int)(plane % d.channels));
        float o[Op::kOut];
        op.pooled_element(in, (int)(plane % d.channels), pooled, o);
        for (int m = 0; m < Op::kOut; ++m) op.out[m][i] = o[m];
    }
    return 0;
}
"""


def _host_main(plan) -> str:
    """main(kernel, dir): reads dims.txt and in<k>.bin, calls the kernel's launcher, writes out<m>.bin."""
    lines = ["#include <cstdio>", "#include <cstring>", "#include <vector>",
             "static std::vector<float> ff_read(const char* dir, const char* name) {",
             "    char path[4096]; std::snprintf(path, sizeof path, \"%s/%s\", dir, name);",
             "    FILE* f = std::fopen(path, \"rb\"); std::fseek(f, 0, SEEK_END); long bytes = std::ftell(f);",
             "    std::fseek(f, 0, SEEK_SET); std::vector<float> v(bytes / 4 + 1);",
             "    if (std::fread(v.data(), 1, bytes, f) != (size_t)bytes) v.clear(); std::fclose(f); return v;", "}",
             "int main(int argc, char** argv) {",
             "    if (argc != 3) return 2;",
             "    char path[4096]; std::snprintf(path, sizeof path, \"%s/dims.txt\", argv[2]);",
             "    FILE* f = std::fopen(path, \"r\"); long long v[14]; for (int k = 0; k < 14; ++k)"
             " if (std::fscanf(f, \"%lld\", &v[k]) != 1) return 3; std::fclose(f);",
             "    FFCredDims d{v[0], v[1], v[2], 0, v[3], {v[4], v[5], v[6]}, {v[7], v[8], v[9]},",
             "                 /*channel_step=*/v[2], /*position_step=*/1, /*pool_nhwc=*/0};",
             "    const long long out_count = v[10];"]
    for g in plan.groups:
        lines.append(f"    if (std::strcmp(argv[1], \"{g.name}\") == 0) {{")
        for k in range(len(g.inputs)):
            lines.append(f"        std::vector<float> in{k} = ff_read(argv[2], \"in{k}.bin\");")
        for m in range(len(g.outputs)):
            lines.append(f"        std::vector<float> out{m}(out_count);")
        args = [f"in{k}.data()" for k in range(len(g.inputs))] + [f"out{m}.data()" for m in range(len(g.outputs))]
        lines.append(f"        launch_{g.name}({', '.join(args)}, d, nullptr);")
        for m in range(len(g.outputs)):
            lines.append(f"        std::snprintf(path, sizeof path, \"%s/out{m}.bin\", argv[2]);")
            lines.append(f"        f = std::fopen(path, \"wb\"); std::fwrite(out{m}.data(), 4, out_count, f); std::fclose(f);")
        lines.append("        return 0;")
        lines.append("    }")
    lines += ["    return 1;", "}"]
    return "\n".join(lines)


def _host_binary(ext, plan, tmp_path):
    from fuseforge.families.channel_reductions.runtime import CHANNEL_REDUCE_KERNEL_RUNTIME

    cuda = ext.cuda.replace(CHANNEL_REDUCE_KERNEL_RUNTIME, CHANNEL_REDUCE_KERNEL_RUNTIME + HOST_LOOPS)
    cuda = cuda.replace("return ff_cred_launch(op, dims, stream);", "return host_cred_launch(op, dims, stream);")
    cuda = cuda.replace("return ff_pool_launch(op, dims, stream);", "return host_pool_launch(op, dims, stream);")
    source = tmp_path / "host.cu"
    source.write_text(cuda + "\n" + _host_main(plan))
    binary = tmp_path / "host"
    result = subprocess.run([NVCC, "-std=c++17", "-O1", "-o", str(binary), str(source)], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return binary


def _host_dims(group, pooled, shape) -> list[int]:
    spec = group.spec
    n, c, positions = shape[0], shape[1], 1
    for x in shape[2:]:
        positions *= x
    sizes_in, sizes_out, in_positions = [1, 1, 1], [1, 1, 1], 0
    if spec.pool:
        in_positions = 1
        for a, x in enumerate(pooled[2:]):
            sizes_in[a], sizes_out[a] = x, shape[2 + a]
            in_positions *= x
    out_count = n * c * positions if spec.reduction is None else n * positions
    return [n, c, positions, in_positions, *sizes_in, *sizes_out, out_count, 0, 0, 0]


HOST_SIZES = [(1, 1, 1), (2, 3, 5), (1, 7, 12), (3, 5, 49), (2, 9, 33)]
HOST_POOL_SIZES = {1: [(1, 1, (5,)), (2, 3, (9,))], 2: [(1, 1, (5, 5)), (2, 3, (7, 9)), (3, 5, (8, 6))], 3: [(1, 1, (3, 4, 5)), (2, 3, (5, 7, 9))]}


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
@pytest.mark.parametrize("build", [_every_reduction, _every_pool], ids=["reductions", "pools"])
def test_the_generated_op_structs_run_on_the_host_by_the_kernels_loops_match_float64(build, tmp_path, monkeypatch):
    import numpy as np

    captured, plan, ext = build()
    binary = _host_binary(ext, plan, tmp_path)
    by_name = {n.name: n for n in captured.graph.nodes}
    monkeypatch.setattr(sys.modules[__name__], "SIZES", HOST_SIZES)
    monkeypatch.setattr(sys.modules[__name__], "POOL_SIZES", HOST_POOL_SIZES)
    failures, checked = [], 0
    for group in plan.groups:
        for pooled, shape in _cases(group):
            for nan in (False, True):
                checked += 1
                torch.manual_seed(sum(shape) + nan)
                inputs = {k: v.cpu() for k, v in _gpu_inputs(group, by_name, pooled, shape, False, nan, "cpu").items()}
                case = tmp_path / f"{group.name}_{len(failures)}"
                case.mkdir(exist_ok=True)
                (case / "dims.txt").write_text(" ".join(map(str, _host_dims(group, pooled, shape))))
                for k, name in enumerate(group.inputs):
                    inputs[name].contiguous().numpy().astype(np.float32).tofile(case / f"in{k}.bin")
                run = subprocess.run([str(binary), group.name, str(case)], capture_output=True, text=True, timeout=60)
                assert run.returncode == 0, (group.name, run.returncode, run.stderr)
                truth = run_kernel_reference(group, by_name, {k: v.double() for k, v in inputs.items()})
                eager = dict(inputs)
                for name in group.nodes:
                    eager[name] = _run_node(by_name[name], eager)
                for m, out in enumerate(group.outputs):
                    want = truth[out]
                    got = torch.from_numpy(np.fromfile(case / f"out{m}.bin", dtype=np.float32)).view(want.shape)
                    ours, theirs = _rel(got, want), _rel(eager[out], want)
                    where = f"{group.name} {list(pooled or shape)} nan={nan} {out}"
                    if not ours <= 2 * theirs + 1e-6:
                        failures.append(f"{where}: error {ours:.2e} vs eager {theirs:.2e}")
                    if not torch.equal(torch.isnan(got), torch.isnan(want)):
                        failures.append(f"{where}: NaN where float64 has none, or the reverse")
    assert not failures, "\n".join(failures)
    assert checked == sum(len(_cases(g)) for g in plan.groups) * 2 >= 20
