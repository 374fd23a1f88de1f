"""Row kernels: a reduction or normalisation over the last axis with its pointwise neighbours, one kernel.

Plan tests on tiny modules (the forms, where it must not fuse and the recorded reason), the float64
reference of the row kernels, the dev models that need them, nvcc compile checks of the generated code,
and on a GPU the generated kernels against float64 on odd sizes.
"""


import pytest
import torch
from compile_check import GXX, NVCC, assert_compiles_for_hopper_without_spills, compile_binding
from conftest import PROBLEMS
from test_partition import _captured
from torch import nn

from fuseforge.codegen import generate
from fuseforge.config import OptimizeConfig
from fuseforge.evaluate.cpu_check import _run_node, run_kernel_reference
from fuseforge.families import named
from fuseforge.families.rows import table as row_table
from fuseforge.partition import partition
from fuseforge.pipeline import optimize
from fuseforge.plan import KernelStep, TorchStep


def _plan(model, *inputs):
    captured = _captured(model, *inputs)
    return captured, partition(captured.graph, named("rows"))


def _ops(plan, group):
    return [n.rstrip("_0123456789") for n in group.nodes]


class RmsNorm(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6)
        return x + x * rms * self.weight


class ScaledSoftmax(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return torch.softmax(x / 0.7 + self.bias, dim=-1)


class LayerNormRelu(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        with torch.no_grad():
            self.norm.weight.normal_()
            self.norm.bias.normal_()

    def forward(self, x):
        return torch.relu(self.norm(x))


class LogSumExpRelu(nn.Module):
    def __init__(self, keepdim=True):
        super().__init__()
        self.keepdim = keepdim

    def forward(self, x):
        return torch.relu(torch.logsumexp(x, dim=1, keepdim=self.keepdim))


def test_rmsnorm_written_as_a_mean_of_squares_is_one_row_kernel_with_its_prologue_and_epilogue():
    _, plan = _plan(RmsNorm(), torch.randn(4, 8))
    (group,) = plan.groups
    assert [type(s) for s in plan.steps] == [KernelStep]
    assert _ops(plan, group) == ["pow", "mean", "add", "rsqrt", "mul", "mul", "add"]
    assert group.spec.reduction.op == "mean" and group.spec.reduction.data == "pow_1"
    assert dict(group.spec.operands) == {"x": "full", "p_weight": "col"}
    assert [n.rstrip("_0123456789") for n in group.spec.row_nodes] == ["mean", "add", "rsqrt"]
    assert plan.not_fused == []


def test_a_softmax_after_a_division_and_a_bias_is_one_row_kernel_reading_the_bias_per_column():
    _, plan = _plan(ScaledSoftmax(), torch.randn(4, 8))
    (group,) = plan.groups
    assert _ops(plan, group) == ["div", "add", "softmax"]
    assert dict(group.spec.operands) == {"x": "full", "p_bias": "col"}
    assert group.spec.row_nodes == ()  # softmax has one value per element


def test_layer_norm_and_relu_are_one_row_kernel_and_the_gemm_before_them_stays_a_torch_call():
    class GemmLayerNormRelu(LayerNormRelu):
        def __init__(self):
            super().__init__(16)
            self.fc = nn.Linear(8, 16)

        def forward(self, x):
            return super().forward(self.fc(x))

    _, plan = _plan(GemmLayerNormRelu(), torch.randn(4, 8))
    assert [type(s) for s in plan.steps] == [TorchStep, KernelStep]
    (group,) = plan.groups
    assert group.spec.reduction.op == "layer_norm"
    assert dict(group.spec.operands) == {"linear": "full", "p_norm_weight": "col", "p_norm_bias": "col"}
    assert [(w.producer, w.consumer) for w in plan.not_fused] == [("linear", "layer_norm")]
    assert "not pointwise" in plan.not_fused[0].reason


@pytest.mark.parametrize("keepdim", [True, False])
def test_logsumexp_and_relu_write_one_value_per_row_with_or_without_keepdim(keepdim):
    _, plan = _plan(LogSumExpRelu(keepdim), torch.randn(4, 8))
    (group,) = plan.groups
    assert group.spec.reduction.keepdim is keepdim
    assert set(group.spec.row_nodes) == {"logsumexp", "relu"}
    assert group.outputs == ("relu",)


def test_a_softmax_over_another_axis_stays_a_torch_call_and_the_reason_names_the_axis():
    class FirstAxis(nn.Module):
        def forward(self, x):
            return torch.softmax(x * 2.0, dim=0)

    _, plan = _plan(FirstAxis(), torch.randn(4, 8))
    assert all(g.kind != "rows" for g in plan.groups)
    (why,) = [w for w in plan.not_fused if w.consumer == "softmax"]
    assert "not the last axis" in why.reason


def test_an_epilogue_of_a_larger_shape_stays_apart_and_the_reason_says_so():
    class Broadcasts(nn.Module):
        def forward(self, x, y):
            return torch.softmax(x, dim=-1) * y  # y [3, 1, 8]: the product is [3, 4, 8], not the row shape

    _, plan = _plan(Broadcasts(), torch.randn(4, 8), torch.randn(3, 1, 8))
    row = [g for g in plan.groups if g.kind == "rows"]
    assert [g.nodes for g in row] == [("softmax",)]
    (why,) = [w for w in plan.not_fused if w.producer == "softmax"]
    assert "has shape [3, 4, 8]" in why.reason


def test_a_decomposed_softmax_becomes_two_row_kernels_because_a_kernel_holds_one_reduction():
    class Decomposed(nn.Module):
        def forward(self, x):
            e = torch.exp(x - x.amax(dim=-1, keepdim=True))
            return e / e.sum(dim=-1, keepdim=True)

    _, plan = _plan(Decomposed(), torch.randn(4, 8))
    assert [g.spec.reduction.op for g in plan.groups] == ["amax", "sum"]
    reasons = [w.reason for w in plan.not_fused if w.consumer.startswith("sum")]
    assert len(reasons) == 1 and reasons[0].startswith("in the row kernels of amax and of sum")
    assert reasons[0].endswith("a row kernel holds one reduction")


def test_a_row_kernel_takes_in_the_pointwise_producer_of_a_second_full_input():
    class TwoInputs(nn.Module):
        def forward(self, x, y):
            return torch.softmax(x, dim=-1) + torch.sigmoid(y)

    _, plan = _plan(TwoInputs(), torch.randn(4, 8), torch.randn(4, 8))
    (group,) = plan.groups
    assert dict(group.spec.operands) == {"x": "full", "y": "full"}


def test_a_value_read_by_a_torch_call_after_the_reduction_is_written_as_a_kernel_output():
    class SharesTheSoftmax(nn.Module):
        def forward(self, x, v):
            p = torch.softmax(x * 0.5, dim=-1)
            return p @ v, torch.relu(p)

    _, plan = _plan(SharesTheSoftmax(), torch.randn(4, 8), torch.randn(8, 3))
    (group,) = plan.groups
    assert set(group.outputs) == {"softmax", "relu"}


# ---------------------------------------------------------------------------------------- references

@pytest.mark.parametrize("op", ["var", "std", "l2_norm", "l1_norm"])
def test_the_variance_and_norm_references_equal_torch_in_float64_with_each_correction(op):
    torch.manual_seed(0)
    v = torch.randn(5, 7, dtype=torch.float64) * 3 + 1
    for correction in (0.0, 1.0, 2.5):
        red = row_table.RowReduction(op, "", False, "v", correction=correction)
        want = {"var": lambda c=correction: torch.var(v, -1, correction=c, keepdim=True),
                "std": lambda c=correction: torch.std(v, -1, correction=c, keepdim=True),
                "l2_norm": lambda: torch.linalg.vector_norm(v, 2, -1, keepdim=True),
                "l1_norm": lambda: torch.linalg.vector_norm(v, 1, -1, keepdim=True)}[op]()
        assert torch.allclose(row_table.reference(red, v, {}), want, rtol=1e-12, atol=1e-12), correction


class Statistics(nn.Module):
    def forward(self, x):
        return (torch.var(x, -1), x.std(dim=-1, keepdim=True, unbiased=False), torch.var(x, -1, correction=0),
                torch.nn.functional.normalize(x, dim=-1), torch.linalg.vector_norm(x, 1, -1),
                x.norm(p=3, dim=-1))


def test_variance_std_and_the_one_and_two_norms_over_the_last_axis_are_row_kernels_and_other_norms_are_not():
    """Catches var/std or a vector norm of order 1 or 2 left a torch call, a wrong correction read from
    `unbiased` or `correction`, and a norm of another order taken as one (its value would be wrong)."""
    from fuseforge.rewrite import rewrite

    captured = _captured(Statistics(), torch.randn(6, 40))
    log = rewrite(captured.graph, captured)  # F.normalize's expand is dropped: its division joins the row kernel
    assert [f.rule for f in log.firings] == ["pointwise_of_an_expand"]
    plan = partition(captured.graph, named("rows"))
    reds = sorted((g.spec.reduction.op, g.spec.reduction.correction) for g in plan.groups if g.kind == "rows")
    assert reds == [("l1_norm", 0.0), ("l2_norm", 0.0), ("std", 0.0), ("var", 0.0), ("var", 1.0)]
    normalize = next(g for g in plan.groups if g.kind == "rows" and g.spec.reduction.op == "l2_norm")
    assert any("div" in n for n in normalize.nodes)  # F.normalize's division is the kernel's epilogue
    grouped = {n for g in plan.groups for n in g.nodes}
    (third,) = [n for n in captured.graph.nodes if n.target is torch.ops.aten.linalg_vector_norm.default
                and n.args[1] == 3]
    assert third.name not in grouped
    assert "order 3" in row_table.row_op_reason(third)  # the report's reason it stays a torch call


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp", "layer_norm", "mean", "sum", "amax", "amin"])
def test_the_row_reference_formulas_equal_torch_in_float64(op):
    torch.manual_seed(0)
    v = torch.randn(5, 7, dtype=torch.float64) * 3
    v[1] = float("-inf")  # a row of -inf
    v[2, 3] = float("-inf")
    w, b = torch.randn(7, dtype=torch.float64), torch.randn(7, dtype=torch.float64)
    red = row_table.RowReduction(op, "", op in ("softmax", "log_softmax", "layer_norm"), "v", ("w", "b"), 1e-5)
    want = {"softmax": lambda: torch.softmax(v, -1), "log_softmax": lambda: torch.log_softmax(v, -1),
            "logsumexp": lambda: torch.logsumexp(v, -1, keepdim=True),
            "layer_norm": lambda: torch.nn.functional.layer_norm(v, [7], w, b, 1e-5),
            "mean": lambda: v.mean(-1, keepdim=True), "sum": lambda: v.sum(-1, keepdim=True),
            "amax": lambda: v.amax(-1, keepdim=True), "amin": lambda: v.amin(-1, keepdim=True)}[op]()
    got = row_table.reference(red, v, {"w": w, "b": b})
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)


def test_the_row_reference_refuses_an_input_that_does_not_fit_its_class():
    captured, plan = _plan(ScaledSoftmax(), torch.randn(4, 8))
    (group,) = plan.groups
    by_name = {n.name: n for n in captured.graph.nodes}
    with pytest.raises(ValueError, match="p_bias"):
        run_kernel_reference(group, by_name, {"x": torch.randn(4, 8), "p_bias": torch.randn(5)})


ROW_MODELS = ["rmsnorm_residual", "gemm_softmax_rows", "gemm_layernorm_relu", "matmul_logsumexp_relu",
              "bmm_scale_softmax_bmm"]
EXPECTED_STEPS = {
    "rmsnorm_residual": ["kernel mean"],
    "gemm_softmax_rows": ["torch", "kernel softmax"],
    "gemm_layernorm_relu": ["torch", "kernel layer_norm"],
    "matmul_logsumexp_relu": ["torch", "kernel logsumexp"],
    "bmm_scale_softmax_bmm": ["torch", "torch", "kernel softmax", "torch"],
}


@pytest.mark.parametrize("name", ROW_MODELS)
def test_a_dev_row_model_gets_one_row_kernel_and_passes_the_float64_cpu_check(name, tmp_path):
    run = optimize(OptimizeConfig(model_path=PROBLEMS / "dev" / f"{name}.py", out_dir=tmp_path, gpu=False,
                                  families=frozenset({"rows"})))
    steps = [f"kernel {s.group.spec.reduction.op}" if isinstance(s, KernelStep) and s.group.kind == "rows" else
             "kernel" if isinstance(s, KernelStep) else "torch" for s in run.plan.steps]
    assert steps == EXPECTED_STEPS[name]
    assert run.cpu_check.passed and run.cpu_check.max_rel_error <= 1e-9, run.cpu_check.detail
    assert any(d.startswith("emitted output 0") for d in run.cpu_check.detail)
    assert "row kernel" in (tmp_path / "40_model_new.py").read_text()


# ---------------------------------------------------------------------------------------- compile

class EveryForm(nn.Module):
    """One model with a row kernel of every op and operand class: 1, 2, 3 and 5 full-shape inputs (5: the
    two-pass path only), per-row outputs only, per-row inputs and scalars, no keepdim, a decomposed softmax; a
    comparison of the per-row value among the per-row values (a bool in the kernel's Row struct: `fuzz --seed 66182`
    did not compile when the struct held floats only), kept per row and read per element."""

    def __init__(self, dim=8):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x, y, z, u, t, r, s):
        a = torch.softmax(x * 0.125, dim=-1)
        b = torch.log_softmax(x + y, dim=-1)
        c = torch.relu(self.norm(x - y + z))
        d = torch.logsumexp(x, dim=-1)
        e = x.sum(dim=-1, keepdim=True) * r + s
        f = torch.sigmoid(x.amax(dim=-1)) - x.amin(dim=-1)
        g = RmsNorm.forward(self, x)
        h = torch.softmax(x * y + z * r - (u - x) * 2.0 + torch.tanh(t * z) + torch.exp(y), dim=-1) * (x + y + z)
        ex = torch.exp(x - x.amax(dim=-1, keepdim=True))
        m = x.amin(dim=-1, keepdim=True)
        i = torch.where(m > 0, m, m * 0.3)
        j = y * (y.amax(dim=-1, keepdim=True) > 0.5)
        k = torch.var(x, dim=-1) + x.std(dim=-1, unbiased=False)
        n = (y + 1.0) / torch.linalg.vector_norm(y + 1.0, 2, -1, keepdim=True) + torch.linalg.vector_norm(z, 1, -1,
                                                                                                         keepdim=True)
        return a, b, c, d, e, f, g, h, ex / ex.sum(dim=-1, keepdim=True), i, j, k, n


def _every_form():
    inputs = (*[torch.randn(4, 8) for _ in range(5)], torch.randn(4, 1), torch.randn(()))
    captured = _captured(EveryForm(), *inputs)
    plan = partition(captured.graph, named("rows"))
    return captured, plan, generate(plan, captured.graph, "every_form.py")


def test_every_form_of_the_test_model_is_a_row_kernel():
    _, plan, ext = _every_form()
    ops = sorted(g.spec.reduction.op for g in plan.groups if g.kind == "rows")
    assert ops == sorted(["softmax", "log_softmax", "layer_norm", "logsumexp", "sum", "amax", "amin", "mean",
                          "softmax", "amax", "sum", "amin", "amax", "var", "std", "l2_norm", "l1_norm"])
    assert "struct Row { float amin_1; bool gt; " in ext.cuda
    assert max(sum(c == "full" for _, c in g.spec.operands) for g in plan.groups if g.kind == "rows") == 5
    classes = {c for g in plan.groups if g.kind == "rows" for _, c in g.spec.operands}
    assert classes == {"full", "col", "row", "row-flat", "scalar"}
    assert ext.cuda.count("(row kernel)") == len(ops)


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
@pytest.mark.parametrize("std", ["c++17", "c++20"])
def test_the_row_kernels_compile_for_hopper_without_warnings_or_spills(std, tmp_path):
    _, _, ext = _every_form()
    assert_compiles_for_hopper_without_spills(ext.cuda, tmp_path, std=std)


@pytest.mark.skipif(GXX is None, reason="g++ is not installed")
def test_the_row_kernel_binding_compiles_against_torch_headers(tmp_path):
    _, _, ext = _every_form()
    result = compile_binding(ext, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]


# ---------------------------------------------------------------------------------------- GPU

SIZES = [(1, 1), (257, 1), (257, 3), (3, 255), (64, 1000), (5, 1024), (3, 1025), (3, 4097), (2, 16384),
         (2, 16385), (2, 20000), (1, 65537), (64, 4096)]


def _inputs_for(group, rows, cols, misaligned, device, by_name, far=False):
    """Inputs at rows x cols, each of its traced rank (a per-row operand is [rows, 1] or [rows]); `far`: the full
    operands far from zero next to their spread (3 +- 1e-4: nearly constant rows, as the exponential of a
    convolution's output at tiny inputs), where Welford statistics taken at the values' scale lose the spread.

    Full operands are signed but have a positive mean (2·randn + 3): with zero-mean data some rows of a
    sum sum to almost zero, and the error of such a row's sum (and of what divides by it) depends on the
    order of the additions alone, so "within 2x of eager's error" would be decided by chance, not by
    the kernel (seen on an H100: ex / ex.sum() with signed ex)."""
    values = {}
    for name, cls in group.spec.operands:
        traced_rank = len(by_name[name].meta["val"].shape)
        per_row = (rows, 1) if traced_rank == 2 else (rows,)
        shape = {"full": (rows, cols), "col": (cols,), "row": per_row, "row-flat": per_row, "scalar": ()}[cls]
        n = 1
        for d in shape:
            n *= d
        flat = torch.randn(n + 1, device=device) * 2 + (3 if cls == "full" else 0)
        if far and cls == "full":
            flat = 3.0 + (flat - 3.0) * 5e-5
        values[name] = (flat[1:] if misaligned and cls == "full" else flat[:n]).view(shape)
    return values


def _rel(got, want):
    diff = (got.double().cpu() - want).nan_to_num(0.0)
    return (diff.norm() / want.nan_to_num(0.0).norm().clamp_min(1e-30)).item()


def _run_node_at_row_length(node, env, cols):
    """_run_node, with layer_norm's normalized_shape (traced as [8]) set to the row length being tested."""
    if node.target is not torch.ops.aten.layer_norm.default:
        return _run_node(node, env)
    data, _, *rest = node.args
    return torch.ops.aten.layer_norm.default(env[data.name], [cols], *[env[a.name] if hasattr(a, "name") else a
                                                                          for a in rest])


# Row ops whose statistics are Welford's (a mean and the squared deviations from it): the far-from-zero case's groups.
WELFORD_OPS = ("layer_norm", "var", "std")


@pytest.mark.gpu
@pytest.mark.parametrize("far", [False, True], ids=["spread-rows", "welford-rows-far-from-zero-next-to-their-spread"])
def test_the_generated_row_kernels_match_float64_on_odd_sizes_like_eager_does(far):
    from torch.utils.cpp_extension import load_inline

    captured, plan, ext = _every_form()
    kernels = load_inline(name=ext.name, cpp_sources=[ext.binding], cuda_sources=[ext.cuda],
                          functions=list(ext.functions), extra_cflags=list(ext.cflags), extra_cuda_cflags=list(ext.nvcc_flags),
                          no_implicit_headers=True)
    by_name = {n.name: n for n in captured.graph.nodes}
    stream = torch.cuda.current_stream().cuda_stream
    failures = []
    groups = [g for g in plan.groups if g.kind == "rows" and (not far or g.spec.reduction.op in WELFORD_OPS)]
    assert groups
    for group in groups:
        for rows, cols in SIZES:
            for misaligned in (False, True):
                torch.manual_seed(rows * 7919 + cols)
                inputs = _inputs_for(group, rows, cols, misaligned, "cuda", by_name, far)
                got = getattr(kernels, group.name)(*[inputs[i] for i in group.inputs], stream)
                got = got if isinstance(got, (list, tuple)) else [got]
                truth = run_kernel_reference(group, by_name, {k: v.double().cpu() for k, v in inputs.items()})
                eager = dict(inputs)  # the graph's torch ops in fp32 on the GPU
                for n in group.nodes:
                    eager[n] = _run_node_at_row_length(by_name[n], eager, cols)
                for out, value in zip(group.outputs, got):
                    want = truth[out]
                    ours, theirs = _rel(value, want), _rel(eager[out], want)
                    if tuple(value.shape) != tuple(want.shape) or not ours <= 2 * theirs + 1e-7:
                        failures.append(f"{group.name} {rows}x{cols} misaligned={misaligned} {out}: "
                                        f"shape {tuple(value.shape)}, error {ours:.2e} vs eager {theirs:.2e}")
    assert not failures, "\n".join(failures)
