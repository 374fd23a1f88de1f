"""GEMM kernels (the gemm family): a float32 GEMM with the pointwise chain after it as one 3xTF32 kernel.

Plan tests on the problem models and tiny modules (the forms, where it must not fuse and the recorded
reason), the float64 CPU check through
the command line, nvcc/g++ compile checks of the generated code, and on a GPU the generated GEMM kernels
against float64 on odd shapes (every kernel variant).
"""

import re
import subprocess
import sys

import pytest
import torch
from compile_check import GXX, NVCC, assert_compiles_for_hopper_without_spills, compile_binding
from conftest import ALL_MODELS, PROBLEMS
from test_partition import _captured
from torch import nn

from fuseforge.codegen import generate
from fuseforge.evaluate.cpu_check import _run_node, run_kernel_reference
from fuseforge.families import named
from fuseforge.families.gemm.group import gemm_op_reason
from fuseforge.families.gemm.runtime import GEMM_VARIANT
from fuseforge.partition import format_plan, partition
from fuseforge.plan import KernelStep


def _model_plan(name, *families):
    from fuseforge.capture import capture
    from fuseforge.load import load_model_file
    from fuseforge.rewrite import rewrite

    captured = capture(load_model_file(next(PROBLEMS.glob(f"*/{name}.py"))))
    rewrite(captured.graph, captured)
    return captured, partition(captured.graph, named(*families))


def _ops(group):
    return [n.rstrip("_0123456789") for n in group.nodes]


def _steps(plan):
    return [f"gemm {s.group.spec.gemm.op}" if isinstance(s, KernelStep) and s.group.kind == "gemm" else
            f"row {s.group.spec.reduction.op}" if isinstance(s, KernelStep) and s.group.kind == "rows" else
            "channel" if isinstance(s, KernelStep) and s.group.kind == "channel_norms" else
            "kernel" if isinstance(s, KernelStep) else "torch" for s in plan.steps]


# ---------------------------------------------------------------------------------------- problem models

def test_gemm_sigmoid_scaling_residualadd_is_one_gemm_kernel_with_bias_sigmoid_scale_and_residual():
    _, plan = _model_plan("gemm_sigmoid_scaling_residualadd", "gemm")
    (group,) = plan.groups
    assert _steps(plan) == ["gemm linear"]
    assert _ops(group) == ["linear", "sigmoid", "mul", "add"]
    assert group.spec.gemm.layout == "TN" and not group.spec.gemm.batched
    assert dict(group.spec.operands) == {"p_gemm_bias": "col"}
    assert plan.not_fused == []


def test_gemm_gelu_tanh_is_one_gemm_kernel_whose_epilogue_is_the_tanh_gelu():
    captured, plan = _model_plan("gemm_gelu_tanh", "gemm")
    (group,) = plan.groups
    assert _ops(group) == ["linear", "gelu"]
    ext = generate(plan, captured.graph, "gemm_gelu_tanh.py")
    functor = ext.cuda[ext.cuda.index(f"struct {group.name}_epilogue"):]
    assert "ff_gelu_tanh(linear)" in functor and "ff_acc + p_proj_bias" in functor


def test_gemm_scale_batchnorm_fuses_the_scale_into_the_gemm_and_leaves_the_batch_norm_to_torch_or_the_channel_kernels():
    _, plan = _model_plan("gemm_scale_batchnorm", "gemm")
    (gemm,) = plan.groups
    assert _ops(gemm) == ["linear", "mul"] and gemm.outputs == ("mul_2",)
    assert dict(gemm.spec.operands) == {"p_gemm_bias": "col", "p_scale": "col"}
    (why,) = [w for w in plan.not_fused if w.producer == "mul_2"]
    assert why.consumer.startswith("_native_batch_norm") and "not pointwise" in why.reason
    _, both = _model_plan("gemm_scale_batchnorm", "gemm", "channel_norms", "channel_reductions")
    assert _steps(both) == ["gemm linear", "torch", "channel"]
    channel = both.groups[1].spec
    assert dict(channel.operands)["mul_2"] == "full"


def test_bmm_scale_softmax_bmm_gets_a_batched_tn_gemm_with_the_scale_and_an_nn_gemm_for_probs_times_v():
    captured, plan = _model_plan("bmm_scale_softmax_bmm", "gemm")
    assert _steps(plan) == ["torch", "gemm bmm", "torch", "gemm bmm"]
    first, second = plan.groups
    assert _ops(first) == ["bmm", "mul"] and first.spec.gemm.layout == "TN" and first.spec.gemm.batched
    (why,) = [w for w in plan.not_fused if w.consumer == "softmax"]
    assert "a GEMM kernel's epilogue computes pointwise ops" in why.reason
    # probs @ v has N = head_dim = 64 (each 128 x 128 tile half empty) and v as [K, N] rows (the binding copies
    # it to [N, K]); at the measured rate the time model still expects 512 tiles of K = 1024 to beat cuBLAS by
    # more than the margin: 0.131 ms vs 0.181 ms.
    assert _ops(second) == ["bmm"] and second.spec.anchor == "bmm_1" and second.spec.gemm.layout == "NN"
    assert gemm_op_reason(next(n for n in captured.graph.nodes if n.name == "bmm_1")) is None
    _, with_rows = _model_plan("bmm_scale_softmax_bmm", "gemm", "rows")
    assert _steps(with_rows) == ["torch", "gemm bmm", "row softmax", "gemm bmm"]


def test_a_product_with_few_tiles_over_a_long_k_stays_in_cublas_and_the_reason_gives_both_estimates():
    captured, plan = _model_plan("linear_chain_no_activation", "gemm")
    assert "mm" not in [g.spec.anchor for g in plan.groups if g.kind == "gemm"]
    product = next(n for n in captured.graph.nodes if n.name == "mm")  # the rewrite's weight product, 256 x 1024
    reason = gemm_op_reason(product)
    # 0.253 ms for the wave, 0.026 ms for the copy of its NN B ([8192, 1024], read as [1024, 8192] rows)
    assert reason.startswith("16 output tiles of 128 x 128 over K = 8192: expected 0.279 ms in our kernel (1 wave(s)")
    assert "(cuBLAS stays)" in reason


def test_the_gemm_time_model_reproduces_the_measured_headline_and_counts_whole_waves():
    from fuseforge import rates

    headline = 2 * 1024 * 8192 * 8192 / rates.GEMM3X_FLOPS
    assert rates.gemm3x_seconds(1, 1024, 8192, 8192) == pytest.approx(headline)
    assert rates.gemm3x_seconds(1, 128, 128, 8192) == pytest.approx(headline / 4)  # one tile: one wave of four
    assert rates.gemm3x_seconds(1, 128 * 133, 128, 8192) == pytest.approx(headline / 2)  # 133 tiles: two waves


def test_a_gemv_shaped_product_stays_a_torch_call_and_the_reason_names_the_thin_side():
    _, plan = _model_plan("gemm_mean_tanh", "gemm")
    assert not any(g.kind == "gemm" for g in plan.groups)
    assert any("N = 1 is below 16" in w.reason for w in plan.not_fused)


# ---------------------------------------------------------------------------------------- default unchanged

@pytest.mark.parametrize("path", [p for p in ALL_MODELS if not re.search(r"Linear|matmul|@|bmm|\bmm\b", p.read_text())],
                         ids=lambda p: p.stem)
def test_the_gemm_flag_changes_nothing_for_a_model_without_a_gemm(path):
    from fuseforge.capture import capture
    from fuseforge.load import load_model_file
    from fuseforge.rewrite import rewrite

    captured = capture(load_model_file(path))
    rewrite(captured.graph, captured)
    assert format_plan(partition(captured.graph, named("gemm"))) == format_plan(partition(captured.graph))


# ---------------------------------------------------------------------------------------- small forms

class EveryEpilogue(nn.Module):
    """One GEMM group of every anchor and epilogue form: linear with bias, sigmoid, scale and a full residual;
    addmm with alpha/beta and a per-row vector; matmul NN with a scalar tensor, where and a second output;
    bmm TN (through a transpose) with a scale; bmm NN alone."""

    def __init__(self, k=24, n=1024):
        super().__init__()
        self.fc = nn.Linear(k, n)
        self.w = nn.Parameter(torch.randn(k, n))
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, x, r, rows, s, q, kk, v):
        a = torch.sigmoid(self.fc(x)) * 2.0 + r
        b = torch.relu(torch.addmm(self.bias, x, self.w, beta=0.5, alpha=1.5) - rows)
        m = torch.matmul(x, self.w)
        c = torch.where(m > 0, m * s, torch.tanh(m))
        d = torch.bmm(q, kk.transpose(1, 2)) * 0.125
        e = torch.bmm(torch.softmax(d, dim=-1), v)
        return a, b, c, m.exp(), d, e


def _every_epilogue():
    # Sizes at which the time model picks a GEMM kernel for every form, the NN ones paying for the copy of their
    # B: K is short, and the outputs are large enough that cuBLAS's round trip through memory costs more.
    inputs = (torch.randn(2048, 24), torch.randn(2048, 1024), torch.randn(2048, 1), torch.randn(()),
              torch.randn(2, 8192, 24), torch.randn(2, 48, 24), torch.randn(2, 48, 128))
    captured = _captured(EveryEpilogue(), *inputs)
    plan = partition(captured.graph, named("gemm"))
    return captured, plan, generate(plan, captured.graph, "every_epilogue.py")


def test_every_form_of_the_test_model_is_a_gemm_group_with_its_epilogue_and_operand_classes():
    _, plan, ext = _every_epilogue()
    gemms = [g for g in plan.groups if g.kind == "gemm"]
    assert [(g.spec.gemm.op, g.spec.gemm.layout) for g in gemms] == [
        ("linear", "TN"), ("addmm", "NN"), ("matmul", "NN"), ("bmm", "TN"), ("bmm", "NN")]
    assert {c for g in gemms for _, c in g.spec.operands} == {"full", "row", "col", "scalar"}
    assert len(gemms[2].outputs) == 2  # the product itself is read by exp outside the kernel
    assert ext.cuda.count("(GEMM kernel, 3xTF32") == 5
    assert f"constexpr int kFFGemmVariant = {GEMM_VARIANT};" in ext.cuda
    assert ext.cuda_flags == ("-gencode=arch=compute_90a,code=sm_90a",)


def test_a_pointwise_producer_of_the_gemms_operand_stays_apart_because_there_is_no_prologue():
    class Prologue(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 16)

        def forward(self, x):
            return torch.relu(self.fc(torch.tanh(x)))

    captured = _captured(Prologue(), torch.randn(32, 8))
    plan = partition(captured.graph, named("gemm"))
    assert [type(s) for s in plan.steps] == [KernelStep, KernelStep]
    assert _ops(plan.groups[1]) == ["linear", "relu"]
    (why,) = [w for w in plan.not_fused if w.producer == "tanh"]
    assert "no prologue fusion" in why.reason


def test_a_float64_gemm_stays_a_torch_call_and_the_reason_names_the_dtype():
    class Double(nn.Module):
        def forward(self, x, w):
            return torch.relu(x @ w)

    captured = _captured(Double(), torch.randn(32, 16, dtype=torch.float64), torch.randn(16, 24, dtype=torch.float64))
    plan = partition(captured.graph, named("gemm"))
    assert not any(g.kind == "gemm" for g in plan.groups)
    (matmul,) = [n for n in captured.graph.nodes if n.name == "matmul"]
    assert "has dtype torch.float64; the 3xTF32 GEMM reads float32" in gemm_op_reason(matmul)


def test_a_reduction_after_the_gemm_stays_apart_and_two_gemms_do_not_share_a_kernel():
    class TwoGemms(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 16), nn.Linear(8, 16)

        def forward(self, x):
            return (self.a(x) + self.b(x)).sum(dim=0)

    captured = _captured(TwoGemms(), torch.randn(32, 8))
    plan = partition(captured.graph, named("gemm"))
    assert sorted(_ops(g) for g in plan.groups) == [["linear"], ["linear", "add"]]
    reasons = {w.consumer.rstrip("_0123456789"): w.reason for w in plan.not_fused}
    assert set(reasons) == {"add", "sum"}
    assert "a GEMM kernel holds one GEMM" in reasons["add"] and "not pointwise" in reasons["sum"]


def test_the_gemm_reference_refuses_an_epilogue_input_that_does_not_fit_its_class():
    captured, plan, _ = _every_epilogue()
    group = next(g for g in plan.groups if g.kind == "gemm" and g.spec.gemm.op == "addmm")
    by_name = {n.name: n for n in captured.graph.nodes}
    inputs = {"x": torch.randn(32, 24), "p_w": torch.randn(24, 40), "p_bias": torch.randn(40), "rows": torch.randn(5, 1)}
    with pytest.raises(ValueError, match="rows"):
        run_kernel_reference(group, by_name, {i: inputs[i] for i in group.inputs})


def test_optimize_no_gpu_checks_the_seed_model_in_float64_and_explains_the_kernel(tmp_path):
    model = PROBLEMS / "seed" / "gemm_sigmoid_scaling_residualadd.py"
    result = subprocess.run([sys.executable, "-m", "fuseforge", "optimize", str(model), "-o", str(tmp_path), "--no-gpu"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "gemm kernel: linear TN" in (tmp_path / "20_partition.txt").read_text()
    model_new = (tmp_path / "40_model_new.py").read_text()
    assert "one GEMM kernel (3xTF32 TN, epilogue fused)" in model_new and "compute_90a" in model_new
    report = (tmp_path / "report.md").read_text()
    assert "→ GEMM kernel `fused_linear_sigmoid_mul_add`: a linear on the tensor cores in 3xTF32" in report
    assert f"- GEMM kernels: the 3xTF32 GEMM of `families/gemm/gemm_3xtf32.cu` (variant {GEMM_VARIANT}," in report


# ---------------------------------------------------------------------------------------- compile

@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
@pytest.mark.parametrize("std", ["c++17", "c++20"])
def test_the_gemm_kernels_compile_for_hopper_without_warnings_or_spills(std, tmp_path):
    _, _, ext = _every_epilogue()
    report = assert_compiles_for_hopper_without_spills(ext.cuda, tmp_path, std, max_registers=255)
    spills = [line for line in report.splitlines() if "spill" in line]
    assert all("0 bytes stack frame" in line for line in spills)
    assert "gemm3x_ws_kernel" in report  # variant 2 is instantiated for the generated epilogues


@pytest.mark.skipif(GXX is None, reason="g++ is not installed")
def test_the_gemm_kernel_binding_compiles_against_torch_headers(tmp_path):
    _, _, ext = _every_epilogue()
    result = compile_binding(ext, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]


# ---------------------------------------------------------------------------------------- GPU

SHAPES = [(77, 130, 33), (1, 1, 1), (128, 128, 32), (129, 257, 65), (1000, 1000, 999), (5, 300, 1), (300, 3, 7)]


def _operands(group, m, n, k, batch, misaligned, by_name):
    """The group's inputs at M x N x K (batch for bmm): A, B in the traced layout, epilogue operands by class.
    A is scaled by 1/sqrt(K), so products are of order 1 at every K (exp of one stays finite in fp32)."""
    g = group.spec.gemm

    def tensor(*shape, scale=1.0):
        count = 1
        for d in shape:
            count *= d
        flat = torch.randn(count + 1, device="cuda") * scale
        return (flat[1:] if misaligned else flat[:count]).view(shape)  # misaligned: 4 bytes past 16-byte alignment

    lead = (batch,) if g.batched else ()
    values = {g.a: tensor(*lead, m, k, scale=k ** -0.5)}
    if g.op == "linear":
        values[g.b] = tensor(n, k) if g.b_transposed else tensor(k, n).t()
    else:
        values[g.b] = tensor(*lead, n, k).transpose(-1, -2) if g.b_transposed else tensor(*lead, k, n)
    full = (*lead, m, n)
    for name, cls in group.spec.operands:
        traced = len(by_name[name].meta["val"].shape)
        shape = {"full": full, "row": (*lead, m, 1), "col": (n,) if traced == 1 else (1, n), "scalar": ()}[cls]
        values[name] = tensor(*shape)
    return values


def _rel(got, want):
    diff = (got.double().cpu() - want).nan_to_num(0.0)
    return (diff.norm() / want.nan_to_num(0.0).norm().clamp_min(1e-30)).item()


@pytest.mark.gpu
@pytest.mark.parametrize("variant", [0, 1, 2])
def test_the_generated_gemm_kernels_match_float64_on_odd_shapes_like_eager_does(variant):
    from torch.utils.cpp_extension import load_inline

    captured, plan, ext = _every_epilogue()
    cuda = ext.cuda.replace(f"constexpr int kFFGemmVariant = {GEMM_VARIANT};", f"constexpr int kFFGemmVariant = {variant};")
    kernels = load_inline(name=f"{ext.name}_v{variant}", cpp_sources=[ext.binding], cuda_sources=[cuda],
                          functions=list(ext.functions), extra_cflags=list(ext.cflags),
                          extra_cuda_cflags=list(ext.nvcc_flags), no_implicit_headers=True)
    by_name = {n.name: n for n in captured.graph.nodes}
    stream = torch.cuda.current_stream().cuda_stream
    torch.backends.cuda.matmul.allow_tf32 = False  # eager fp32 is SGEMM
    failures = []
    for group in [g for g in plan.groups if g.kind == "gemm"]:
        for m, n, k in SHAPES:
            for batch in ((1, 3) if group.spec.gemm.batched else (1,)):
                for misaligned in (False, True):
                    torch.manual_seed(m * 7919 + n * 31 + k)
                    inputs = _operands(group, m, n, k, batch, misaligned, by_name)
                    got = getattr(kernels, group.name)(*[inputs[i] for i in group.inputs], stream)
                    got = got if isinstance(got, (list, tuple)) else [got]
                    truth = run_kernel_reference(group, by_name, {i: v.double().cpu() for i, v in inputs.items()})
                    eager = dict(inputs)
                    for name in group.nodes:
                        eager[name] = _run_node(by_name[name], eager)
                    for out, value in zip(group.outputs, got):
                        want = truth[out]
                        ours, theirs = _rel(value, want), _rel(eager[out], want)
                        # DESIGN §3: within 2x of eager fp32's error, plus the lab bench's floor of 1e-6 (at K = 1 a
                        # 3xTF32 product is good to ~5e-7, an fp32 product to 6e-8)
                        if tuple(value.shape) != tuple(want.shape) or not ours <= 2 * theirs + 1e-6:
                            failures.append(f"variant {variant} {group.name} {m}x{n}x{k} batch {batch} "
                                            f"misaligned={misaligned} {out}: error {ours:.2e} vs eager {theirs:.2e}")
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
def test_the_seed_model_with_gemm_kernels_is_verified_on_the_gpu(tmp_path):
    model = PROBLEMS / "seed" / "gemm_sigmoid_scaling_residualadd.py"
    result = subprocess.run([sys.executable, "-m", "fuseforge", "optimize", str(model), "-o", str(tmp_path),
                             "--trials", "10"], capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert (tmp_path / "model_new.py").exists()


class _LinearRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(96, 80)

    def forward(self, x):
        return torch.relu(self.fc(x))


def twin_gemm_extensions(which: int):
    """One GEMM unit built under two names (`which` 0 or 1): two extensions that instantiate the same launcher with an
    epilogue of the same name, as two ModelNew of one model do. Returns (group, kernels)."""
    from torch.utils.cpp_extension import load_inline

    captured = _captured(_LinearRelu(), torch.randn(200, 96))
    plan = partition(captured.graph, named("gemm"), every_kernel=True)
    ext = generate(plan, captured.graph, "linear_relu.py")
    (group,) = [g for g in plan.groups if g.kind == "gemm"]
    kernels = load_inline(name=f"{ext.name}_twin{which}", cpp_sources=[ext.binding], cuda_sources=[ext.cuda],
                          functions=list(ext.functions), extra_cflags=list(ext.cflags),
                          extra_cuda_cflags=list(ext.nvcc_flags), no_implicit_headers=True)
    return group, kernels


@pytest.mark.gpu
def test_two_builds_of_one_gemm_unit_in_one_process_each_launch_their_kernel():
    """The second extension's launcher raises its own kernel's shared-memory limit: with the launchers' static state
    shared between the two (nvcc's default visibility), its first call failed with "CUDA error: invalid argument"."""
    torch.manual_seed(0)
    x = torch.randn(200, 96, device="cuda")
    w, b = torch.randn(80, 96, device="cuda"), torch.randn(80, device="cuda")
    want = torch.relu(x.double() @ w.double().t() + b.double())
    stream = torch.cuda.current_stream().cuda_stream
    for which in (0, 1):
        group, kernels = twin_gemm_extensions(which)
        assert group.inputs == ("x", "p_fc_weight", "p_fc_bias")
        got = getattr(kernels, group.name)(x, w, b, stream)
        got = got[0] if isinstance(got, (list, tuple)) else got
        assert _rel(got, want.cpu()) < 1e-5, which
