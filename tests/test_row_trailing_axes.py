"""Row kernels over the last k axes together: x.mean((2, 3)) of [N, C, H, W] is N*C rows of H*W values.

Plan tests (which reductions become row kernels, the operand classes of broadcast inputs such as a
[C, 1, 1] bias, what stays a torch call and why), the float64 reference against torch, the CPU check of
a whole model, nvcc and g++ compile checks, and on a GPU the generated kernels at other sizes than traced.
"""


import pytest
import torch
from compile_check import GXX, NVCC, assert_compiles_for_hopper_without_spills, compile_binding
from test_partition import _captured
from test_rows import _rel
from torch import nn

from fuseforge.codegen import generate
from fuseforge.config import OptimizeConfig
from fuseforge.evaluate.cpu_check import _run_node, run_kernel_reference
from fuseforge.families import named
from fuseforge.families.rows import table as row_table
from fuseforge.partition import partition
from fuseforge.pipeline import optimize
from fuseforge.plan import KernelStep

TRACED = (2, 3, 5, 7)  # N, C, H, W: distinct, so each traced size names its axis


class TrailingAxes(nn.Module):
    """A row kernel over the last 2 or 3 axes of each kind: per-row outputs with a broadcast per-row bias
    ([C, 1, 1]) and a scalar; no keepdim with a per-column weight ([H, W]) and a bias broadcast against
    the per-row shape ([C] against [N, C]); LayerNorm over [H, W] then a per-row gain; logsumexp over
    three axes reading a per-column gain ([C, 1, 1] against rows of [C, H, W]); a per-element epilogue of
    a kept per-row sum."""

    def __init__(self, c=3, h=5, w=7):
        super().__init__()
        self.norm = nn.LayerNorm([h, w])
        with torch.no_grad():
            self.norm.weight.normal_()
            self.norm.bias.normal_()
        self.bias = nn.Parameter(torch.randn(c, 1, 1))
        self.gain = nn.Parameter(torch.randn(c, 1, 1))
        self.shift = nn.Parameter(torch.randn(c))
        self.hw = nn.Parameter(torch.randn(h, w))

    def forward(self, x, s):
        a = torch.relu(x + self.bias).mean(dim=(2, 3), keepdim=True) * s
        b = torch.amax(x * self.hw, dim=(-1, -2)) + self.shift
        c = self.norm(x) * self.gain
        d = torch.relu(torch.logsumexp(x * self.gain, dim=(1, 2, 3)))
        e = x - x.sum(dim=(3, 2, 1), keepdim=True)
        return a, b, c, d, e


def _trailing():
    captured = _captured(TrailingAxes(), torch.randn(*TRACED), torch.randn(()))
    plan = partition(captured.graph, named("rows"))
    return captured, plan


def _row(plan, op):
    (group,) = [g for g in plan.groups if g.kind == "rows" and g.spec.reduction.op == op]
    return group


def test_each_reduction_over_trailing_axes_is_one_row_kernel_spanning_those_axes():
    _, plan = _trailing()
    assert all(isinstance(s, KernelStep) for s in plan.steps)
    axes = {g.spec.reduction.op: g.spec.reduction.axes for g in plan.groups}
    assert axes == {"mean": 2, "amax": 2, "layer_norm": 2, "logsumexp": 3, "sum": 3}
    assert plan.not_fused == []


def test_broadcast_inputs_are_read_per_row_per_column_or_against_the_per_row_shape():
    _, plan = _trailing()
    assert dict(_row(plan, "mean").spec.operands) == {"x": "full", "p_bias": "row", "s": "scalar"}
    assert dict(_row(plan, "amax").spec.operands) == {"x": "full", "p_hw": "col", "p_shift": "row-flat"}
    assert dict(_row(plan, "layer_norm").spec.operands) == {
        "x": "full", "p_norm_weight": "col", "p_norm_bias": "col", "p_gain": "row"}
    assert dict(_row(plan, "logsumexp").spec.operands) == {"x": "full", "p_gain": "col"}
    assert _row(plan, "sum").spec.row_nodes == ("sum_1",)


def test_a_reduction_over_axes_that_are_not_trailing_stays_a_torch_call_and_the_reason_says_so():
    class Middle(nn.Module):
        def forward(self, x):
            return torch.relu(x).sum(dim=(1, 2)) * 2.0

    captured = _captured(Middle(), torch.randn(*TRACED))
    plan = partition(captured.graph, named("rows"))
    assert all(g.kind != "rows" for g in plan.groups)
    (why,) = [w for w in plan.not_fused if w.consumer == "sum_1"]
    assert "reduces dims [1, 2], not the last axis (or the last k axes together)" in why.reason


def test_an_input_that_varies_along_both_the_rows_and_the_reduced_axes_stays_outside_the_row_kernel():
    class Mixed(nn.Module):
        def forward(self, x, y):  # y [N, 1, H, 1]: neither one value per row nor per column
            return (x * y).mean(dim=(2, 3))

    captured = _captured(Mixed(), torch.randn(*TRACED), torch.randn(2, 1, 5, 1))
    plan = partition(captured.graph, named("rows"))
    (group,) = [g for g in plan.groups if g.kind == "rows"]
    assert group.nodes == ("mean",)
    (why,) = [w for w in plan.not_fused if w.consumer == "mean"]
    assert "broadcasts neither per element, per row, per column nor as a scalar" in why.reason


@pytest.mark.parametrize("keepdim", [True, False])
def test_a_reduction_over_the_channels_of_a_pooled_tensor_spans_the_unit_axes_after_them_if_kept(keepdim):
    class Pooled(nn.Module):
        def forward(self, x):  # x [N, C, 1, 1]: over dim 1 alone or over dims 1, 2, 3, the same values
            return torch.softmax(x, dim=1) * 2.0, torch.logsumexp(x, dim=1, keepdim=keepdim)

    captured = _captured(Pooled(), torch.randn(64, 16, 1, 1))
    plan = partition(captured.graph, named("rows"))
    rows = {g.spec.reduction.op: g.spec.reduction.over for g in plan.groups if g.kind == "rows"}
    # without keepdim, [N, 1, 1] is not a per-row shape of rows of the last 3 axes: a row along the channels
    assert rows == {"softmax": "over the last 3 axes",
                    "logsumexp": "over the last 3 axes" if keepdim else "over the channel axis"}


def test_a_reduction_of_a_few_long_rows_stays_a_torch_call_and_the_reason_gives_the_row_count():
    class PerSample(nn.Module):
        def forward(self, x):
            return torch.relu(x).mean(dim=(1, 2, 3))

    few = _captured(PerSample(), torch.randn(16, 16, 64, 64))  # 16 rows of 65536 values
    plan = partition(few.graph, named("rows"))
    assert all(g.kind != "rows" for g in plan.groups)
    (why,) = [w for w in plan.not_fused if w.consumer == "mean"]
    assert "16 rows of 65536 values" in why.reason
    enough = _captured(PerSample(), torch.randn(32, 16, 64, 64))
    assert [g.spec.reduction.axes for g in partition(enough.graph, named("rows")).groups] == [3]
    short = _captured(PerSample(), torch.randn(16, 16, 32, 32))  # short rows: launch-bound either way
    assert [g.spec.reduction.axes for g in partition(short.graph, named("rows")).groups] == [3]


@pytest.mark.parametrize("dims,keepdim", [((2, 3), True), ((-1, -2), False), ((1, 2, 3), True), ((3, 1, 2), False)])
@pytest.mark.parametrize("op", ["mean", "sum", "amax", "amin", "logsumexp"])
def test_the_reference_over_trailing_axes_equals_torch_in_float64(op, dims, keepdim):
    torch.manual_seed(0)
    v = torch.randn(*TRACED, dtype=torch.float64) * 3
    v[1, 2] = float("-inf")  # a whole row of -inf (one [H, W] plane)
    red = row_table.RowReduction(op, "", False, "v", keepdim=keepdim, axes=len(dims))
    want = {"mean": lambda: v.mean(dims, keepdim=keepdim), "sum": lambda: v.sum(dims, keepdim=keepdim),
            "amax": lambda: v.amax(dims, keepdim=keepdim), "amin": lambda: v.amin(dims, keepdim=keepdim),
            "logsumexp": lambda: torch.logsumexp(v, dims, keepdim=keepdim)}[op]()
    got = row_table.reference(red, v, {})
    assert got.shape == want.shape
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)


def test_the_layer_norm_reference_over_two_axes_equals_torch_in_float64():
    v = torch.randn(*TRACED, dtype=torch.float64)
    w, b = torch.randn(5, 7, dtype=torch.float64), torch.randn(5, 7, dtype=torch.float64)
    red = row_table.RowReduction("layer_norm", "", True, "v", ("w", "b"), 1e-5, axes=2)
    want = torch.nn.functional.layer_norm(v, [5, 7], w, b, 1e-5)
    assert torch.allclose(row_table.reference(red, v, {"w": w, "b": b}), want, rtol=1e-12, atol=1e-12)


def test_the_row_reference_refuses_a_per_row_bias_of_the_wrong_channel_count():
    captured, plan = _trailing()
    by_name = {n.name: n for n in captured.graph.nodes}
    group = _row(plan, "mean")
    with pytest.raises(ValueError, match="p_bias"):
        run_kernel_reference(group, by_name, {"x": torch.randn(*TRACED), "p_bias": torch.randn(4, 1, 1),
                                              "s": torch.randn(())})


def test_a_model_with_global_average_pools_passes_the_float64_cpu_check_with_row_kernels(tmp_path):
    model = tmp_path / "pools.py"
    model.write_text(
        "import torch\nfrom torch import nn\n\n"
        "class Model(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.bias = nn.Parameter(torch.randn(6, 1, 1))\n\n"
        "    def forward(self, x):\n"
        "        y = nn.functional.adaptive_avg_pool2d(torch.relu(x + self.bias), 1)\n"
        "        return torch.logsumexp(y, dim=(1, 2, 3)) * 2.0, x.amax(dim=(2, 3)), torch.softmax(y, 1) + 1.0\n\n"
        "def get_inputs():\n    return [torch.randn(3, 6, 9, 11)]\n\n"
        "def get_init_inputs():\n    return []\n")
    run = optimize(OptimizeConfig(model_path=model, out_dir=tmp_path / "out", gpu=False, families=frozenset({"rows"})))
    ops = sorted((s.group.spec.reduction.op, s.group.spec.reduction.axes) for s in run.plan.steps
                 if isinstance(s, KernelStep) and s.group.kind == "rows")
    assert ops == [("amax", 2), ("logsumexp", 3), ("mean", 2), ("softmax", 3)]
    assert run.cpu_check.passed and run.cpu_check.max_rel_error <= 1e-9, run.cpu_check.detail


# ---------------------------------------------------------------------------------------- compile

@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_the_trailing_axes_row_kernels_compile_for_hopper_without_warnings_or_spills(tmp_path):
    captured, plan = _trailing()
    ext = generate(plan, captured.graph, "trailing_axes.py")
    assert_compiles_for_hopper_without_spills(ext.cuda, tmp_path)


@pytest.mark.skipif(GXX is None, reason="g++ is not installed")
def test_the_trailing_axes_binding_compiles_against_torch_headers(tmp_path):
    captured, plan = _trailing()
    ext = generate(plan, captured.graph, "trailing_axes.py")
    result = compile_binding(ext, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]


# ---------------------------------------------------------------------------------------- GPU

# N, C, H, W: a batch of 1 and sizes of 1, rows not a multiple of 4 values, the warp, block and two-pass paths
SIZES = [(1, 1, 1, 1), (2, 3, 5, 7), (3, 5, 9, 11), (1, 4, 33, 33), (4, 16, 32, 32), (2, 8, 64, 64),
         (1, 3, 128, 130), (2, 2, 256, 256)]


def _at(shape: tuple, sizes: tuple) -> tuple:
    """A traced shape at other sizes: each traced size of TRACED becomes the same axis' size in `sizes`."""
    return tuple(d if d == 1 else sizes[TRACED.index(d)] for d in shape)


def _run_node_at_sizes(node, env):
    """_run_node, with layer_norm's normalized_shape (traced) set to the trailing sizes of its input now."""
    if node.target is not torch.ops.aten.layer_norm.default:
        return _run_node(node, env)
    data, shape, *rest = node.args
    now = list(env[data.name].shape[-len(shape):])
    return torch.ops.aten.layer_norm.default(env[data.name], now, *[env[a.name] if hasattr(a, "name") else a
                                                                    for a in rest])


def load_kernels(ext):
    from torch.utils.cpp_extension import load_inline

    return load_inline(name=ext.name, cpp_sources=[ext.binding], cuda_sources=[ext.cuda],
                       functions=list(ext.functions), extra_cflags=list(ext.cflags), extra_cuda_cflags=list(ext.nvcc_flags),
                       no_implicit_headers=True)


def mismatches(kernels, group, by_name, inputs: dict, label: str) -> list[str]:
    """One row kernel run on `inputs` (CUDA), each output against float64 (the kernel's reference): the
    error must be within 2x eager fp32's (the graph's torch ops on the GPU) + 1e-7, the shape the same."""
    got = getattr(kernels, group.name)(*[inputs[i] for i in group.inputs], torch.cuda.current_stream().cuda_stream)
    got = got if isinstance(got, (list, tuple)) else [got]
    truth = run_kernel_reference(group, by_name, {k: v.double().cpu() for k, v in inputs.items()})
    eager = dict(inputs)
    for n in group.nodes:
        eager[n] = _run_node_at_sizes(by_name[n], eager)
    failures = []
    for out, value in zip(group.outputs, got):
        want = truth[out]
        ours, theirs = _rel(value, want), _rel(eager[out], want)
        if tuple(value.shape) != tuple(want.shape) or not ours <= 2 * theirs + 1e-7:
            failures.append(f"{group.name} {label} {out}: shape {tuple(value.shape)}, "
                            f"error {ours:.2e} vs eager {theirs:.2e}")
    return failures


@pytest.mark.gpu
def test_the_trailing_axes_row_kernels_match_float64_at_other_sizes_like_eager_does():
    captured, plan = _trailing()
    kernels = load_kernels(generate(plan, captured.graph, "trailing_axes.py"))
    by_name = {n.name: n for n in captured.graph.nodes}
    failures = []
    for group in plan.groups:
        for sizes in SIZES:
            for misaligned in (False, True):
                torch.manual_seed(sum(sizes) * 7919)
                inputs = {}
                for name, cls in group.spec.operands:
                    shape = _at(tuple(by_name[name].meta["val"].shape), sizes)
                    n = max(1, int(torch.tensor(shape).prod())) if shape else 1
                    flat = torch.randn(n + 1, device="cuda") * 2 + (3 if cls == "full" else 0)
                    inputs[name] = (flat[1:] if misaligned and cls == "full" else flat[:n]).view(shape)
                failures += mismatches(kernels, group, by_name, inputs, f"{sizes} misaligned={misaligned}")
    assert not failures, "\n".join(failures)
