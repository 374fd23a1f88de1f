"""Forms that occur in real model files go through every CPU-side stage: tensor constants built in forward,
random ops in train mode, a reshape of a pooled value, a kernel fed a channels-last value."""

from pathlib import Path

import torch
from torch import nn

from fuseforge.config import OptimizeConfig
from fuseforge.pipeline import optimize

HEAD = "import torch\nimport torch.nn as nn\n\n"


def _run(tmp_path: Path, body: str):
    path = tmp_path / "model.py"
    path.write_text(HEAD + body)
    return optimize(OptimizeConfig(model_path=path, out_dir=tmp_path / "out", gpu=False))


CONSTANTS = '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose2d(3, 8, 4, stride=2)

    def forward(self, x):
        x = self.conv(x) + 0.5
        x = torch.min(x, torch.tensor(0.25, device=x.device))
        x = torch.nn.functional.gelu(x)
        return x + torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.5]).view(1, 8, 1, 1).to(x.device)


def get_inputs():
    return [torch.rand(4, 3, 9, 9)]


def get_init_inputs():
    return []
'''


def test_tensor_constants_built_in_forward_become_nodes_and_join_the_pointwise_kernel(tmp_path):
    run = _run(tmp_path, CONSTANTS)
    assert run.cpu_check.passed, run.cpu_check.detail
    constants = [n for n in run.captured.graph.nodes if n.target is torch.tensor]
    assert [list(n.meta["val"].shape) for n in constants] == [[], [8]]
    fused = [op for g in run.plan.groups for op in g.nodes]
    assert "min_1" in fused and "gelu" in fused  # torch.min(x, constant) is a pointwise minimum
    assert not any(str(n.target) == "aten.clone.default" for n in run.captured.graph.nodes)  # copies dropped
    emitted = (tmp_path / "out" / "40_model_new.py").read_text()
    assert "torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.5], dtype=torch.float32, device=x.device)" in emitted


RANDOM = '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16, 32)
        self.dropout = nn.Dropout(0.3)

    def forward(self, x):
        x = self.dropout(torch.relu(self.linear(x)))
        return x + 0.1 * torch.rand_like(x) + torch.randn(x.shape, device=x.device)


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return []
'''


def test_random_ops_in_train_mode_draw_what_the_model_draws_so_the_float64_checks_agree(tmp_path):
    run = _run(tmp_path, RANDOM)
    assert run.captured.training
    assert run.cpu_check.passed and run.cpu_check.max_rel_error == 0.0, run.cpu_check.detail
    ops = [str(n.target) for n in run.captured.graph.nodes if n.op == "call_function"]
    assert {"aten.native_dropout.default", "aten.rand_like.default", "aten.randn.default"} <= set(ops)
    assert any(g.kind == "pointwise" for g in run.plan.groups)


POOL_RESHAPE = '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * 3 * 3, 10)

    def forward(self, x):
        x = self.pool(torch.relu(self.conv(x)))
        x = x.reshape(x.shape[0], -1)
        return self.fc(x)


def get_inputs():
    return [torch.rand(4, 3, 8, 8)]


def get_init_inputs():
    return []
'''


def test_a_view_after_a_kernel_that_read_a_channels_last_value_sees_the_contiguous_output_the_kernel_writes(
        tmp_path):
    run = _run(tmp_path, POOL_RESHAPE)
    assert run.plan.channels_last, "the convolution should run channels-last (its one reader is a kernel)"
    assert run.cpu_check.passed, run.cpu_check.detail
    assert not (tmp_path / "out" / "attempts").exists()


CANCELLATION = '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(32, 64)

    def forward(self, x):
        y = torch.nn.functional.layer_norm(self.linear(x), (64,))
        return y.mean(dim=1)  # ~0 by cancellation: the row kernel rounds it otherwise than torch


def get_inputs():
    return [torch.randn(16, 32) * 100.0]


def get_init_inputs():
    return []
'''


def test_an_output_that_is_zero_by_cancellation_is_judged_against_the_scale_of_its_operands(tmp_path):
    from fuseforge.evaluate.cpu_check import _rel

    run = _run(tmp_path, CANCELLATION)
    assert run.cpu_check.passed and not run.ladder, run.cpu_check.detail  # the row kernel was kept
    assert any(g.kind == "rows" for g in run.plan.groups)
    want = torch.full((4,), 1e-17, dtype=torch.float64)
    assert _rel(want * 3, want) > 1.0  # relative to itself, the rounding of a ~0 value is a 200 % error
    assert _rel(want * 3, want, scale=1.0) < 1e-16  # relative to operands of size 1 it is nothing
    assert _rel(want + 1e-2, want, scale=1.0) > 1e-3  # and a real error (1 % of the operands) still shows


CONSTANTS_OF_THE_INPUTS_DTYPE = '''
class Model(nn.Module):
    def forward(self, x):
        y = torch.min(x, torch.full((1, 5, 7), 0.51, device=x.device, dtype=x.dtype))
        return y + torch.tensor(0.37, dtype=x.dtype) - torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7], dtype=x.dtype)


def get_inputs():
    return [torch.randn(4, 3, 5, 7)]


def get_init_inputs():
    return []
'''


def test_constants_built_with_the_inputs_dtype_hold_their_float32_values_in_every_float64_run(tmp_path):
    run = _run(tmp_path, CONSTANTS_OF_THE_INPUTS_DTYPE)  # the trace records dtype=float32 for dtype=x.dtype
    assert run.cpu_check.passed and not run.ladder, (run.cpu_check.detail, run.ladder)


FACTORY_INTO_A_PRODUCT = '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(16, 32, batch_first=True)  # builds its initial state with zeros of the input's dtype
        self.head = nn.Linear(32, 8)

    def forward(self, x):
        y, _ = self.rnn(x)
        z = torch.zeros(x.shape[0], 16, dtype=x.dtype, device=x.device)
        return torch.relu(self.head(y[:, -1])) + (z @ x[:, 0].T).sum()


def get_inputs():
    return [torch.rand(4, 10, 16)]


def get_init_inputs():
    return []
'''


def test_tensors_built_in_forward_with_the_inputs_dtype_are_float64_in_the_float64_run_of_the_emitted_forward(tmp_path):
    # the trace records dtype=float32: a float32 zeros beside float64 weights stops a matrix product
    run = _run(tmp_path, FACTORY_INTO_A_PRODUCT)
    assert run.cpu_check.passed and not run.ladder, (run.cpu_check.detail, run.ladder)
    assert run.plan.groups  # the plan with kernels was kept, not the model's own forward


STATE_WITHOUT_A_DTYPE = '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(16, 32, batch_first=True)
        self.head = nn.Linear(32, 8)

    def forward(self, x):
        h0 = torch.zeros(1, x.size(0), 32, device=x.device)  # the default dtype: float32 in the model's own run
        y, h = self.rnn(x, h0)
        return torch.sigmoid(self.head(h[-1])) * 2.0


def get_inputs():
    return [torch.rand(4, 10, 16)]


def get_init_inputs():
    return []
'''


def test_a_tensor_built_in_forward_without_a_dtype_is_float64_in_every_float64_run(tmp_path):
    # before: the model's own float64 run stopped (a float32 state beside float64 weights) and optimize ended
    # without a ModelNew
    run = _run(tmp_path, STATE_WITHOUT_A_DTYPE)
    assert run.cpu_check.passed and not run.ladder, (run.cpu_check.detail, run.ladder)
    assert run.plan.groups
    assert torch.get_default_dtype() == torch.float32  # given back


CASTS = '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(32, 16)

    def forward(self, x):
        y = self.linear(x.float())  # a no-op in the model's own run, float32 in its float64 run without care
        return torch.sigmoid(y.to(torch.float32)) * 2.0


def get_inputs():
    return [torch.rand(8, 32)]


def get_init_inputs():
    return []
'''


def test_casts_to_float32_compute_in_float64_in_every_float64_run(tmp_path):
    run = _run(tmp_path, CASTS)  # before: no float64 run could pass the linear layer, and no ModelNew was written
    assert run.cpu_check.passed and not run.ladder, (run.cpu_check.detail, run.ladder)
    assert run.plan.groups


WRITES_ITS_INPUT = '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(32, 16)

    def forward(self, x):
        x.mul_(2.0)  # the caller's tensor is written
        return torch.relu(self.linear(x)) * 0.5


def get_inputs():
    return [torch.rand(8, 32)]


def get_init_inputs():
    return []
'''


def test_a_forward_that_writes_its_input_is_checked_from_the_same_inputs_in_every_float64_run(tmp_path):
    run = _run(tmp_path, WRITES_ITS_INPUT)  # before: every run after the model's own saw the doubled input
    assert run.cpu_check.passed and not run.ladder, (run.cpu_check.detail, run.ladder)
    assert run.plan.groups
    assert "x.copy_(" in (tmp_path / "out" / "40_model_new.py").read_text()  # ModelNew writes the input back
    assert "writes its input `x`" in (tmp_path / "out" / "report.md").read_text()


STATE_AS_A_PLAIN_ATTRIBUTE = '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.h0 = torch.randn(1, 4, 32)  # neither a parameter nor a buffer
        self.rnn = nn.GRU(16, 32, batch_first=True)
        self.head = nn.Linear(32, 8)

    def forward(self, x):
        self.h0 = self.h0.to(x.device)
        y, h = self.rnn(x, self.h0)
        return torch.sigmoid(self.head(h[-1])) * 2.0


def get_inputs():
    return [torch.rand(4, 10, 16)]


def get_init_inputs():
    return []
'''


def test_a_tensor_held_as_a_plain_attribute_is_float64_in_the_float64_runs(tmp_path):
    # before: the float64 model built on the meta device kept a meta h0 ("Cannot copy out of meta tensor"), and
    # the graph's constant stayed float32 beside float64 weights: no ModelNew, then the model's own forward
    run = _run(tmp_path, STATE_AS_A_PLAIN_ATTRIBUTE)
    assert run.cpu_check.passed and not run.ladder, (run.cpu_check.detail, run.ladder)


NON_PERSISTENT_BUFFER = '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(32, 16)
        self.register_buffer("scale", torch.full((16,), 0.5), persistent=False)

    def forward(self, x):
        return torch.relu(self.linear(x)) * self.scale


def get_inputs():
    return [torch.rand(8, 32)]


def get_init_inputs():
    return []
'''


def test_a_non_persistent_buffer_is_read_by_every_float64_run(tmp_path):
    run = _run(tmp_path, NON_PERSISTENT_BUFFER)  # before: KeyError 'scale' at verify, then the model's own forward
    assert run.cpu_check.passed and not run.ladder, (run.cpu_check.detail, run.ladder)
    assert run.plan.groups


def test_the_float64_copy_of_a_module_with_state_outside_its_state_dict_is_of_the_class_asked_for():
    from fuseforge.evaluate.cpu_check import _with_state

    class Base(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("b", torch.ones(3), persistent=False)

    class Sub(Base):
        pass

    like = Base()
    copy = _with_state(Sub, [], {}, like)
    assert type(copy) is Sub and copy.b.dtype == torch.float64  # the emitted ModelNew's forward is the one checked
    assert type(_with_state(Base, [], {}, like)) is Base


TRACKED_INSTANCE_NORM = '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.norm = nn.InstanceNorm2d(8, affine=True, track_running_stats=True)  # updates its buffers in place

    def forward(self, x):
        return torch.relu(self.norm(self.conv(x)))  # the relu: a kernel of the model's own work, so a captured plan


def get_inputs():
    return [torch.rand(4, 3, 16, 16)]


def get_init_inputs():
    return []
'''


def test_a_buffer_an_op_updates_in_place_starts_every_float64_run_from_its_value_before_the_forward(tmp_path):
    # before: the plan's run updated the shared running statistics, the emitted forward's run updated them again
    # (relative error 0.9 against the model's) and only the model's own forward was left
    run = _run(tmp_path, TRACKED_INSTANCE_NORM)
    assert run.cpu_check.passed, run.cpu_check.detail
    assert "own forward" not in " ".join(run.ladder) and run.config.capture, run.ladder


DROPOUT_OF_A_PERMUTED_VALUE = '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.dropout = nn.Dropout(0.5)

    def forward(self, x):
        return self.dropout(torch.sigmoid(x.permute(0, 1, 3, 2)))


def get_inputs():
    return [torch.randn(4, 12, 5, 7)]


def get_init_inputs():
    return []
'''


def test_dropout_of_a_value_a_kernel_wrote_gets_it_in_eagers_memory_order_and_draws_eagers_mask(tmp_path):
    run = _run(tmp_path, DROPOUT_OF_A_PERMUTED_VALUE)
    assert run.cpu_check.passed and not run.ladder, (run.cpu_check.detail, run.ladder)
    assert any(g.kind == "pointwise" for g in run.plan.groups)  # the sigmoid kernel writes contiguous rows
    assert ".permute([0, 1, 3, 2]).contiguous().permute([0, 1, 3, 2]), 0.5, True)" in (
        tmp_path / "out" / "40_model_new.py").read_text()


RANDOM_AFTER_A_BATCH_NORM_OF_A_TRANSPOSED_VALUE = '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 60)
        self.bn = nn.BatchNorm1d(5)

    def forward(self, x):
        x = self.bn(torch.relu(self.lin(x).view(x.shape[0], 12, 5).transpose(1, 2)))
        return x * (torch.rand_like(x) > 0.25)


def get_inputs():
    return [torch.randn(6, 16)]


def get_init_inputs():
    return []
'''


def test_a_random_op_after_a_batch_norm_of_a_transposed_value_draws_in_eagers_row_major_layout(tmp_path):
    """Eager's batch norm writes a transposed [N, C, L] input's output row-major (its input's suggested memory
    format); the trace's meta kernel keeps the input's strides, and the emitted rand_like drew in that other
    order: every rung's emitted forward failed the float64 check (`fuseforge fuzz --seed 62108`, minimised)."""
    run = _run(tmp_path, RANDOM_AFTER_A_BATCH_NORM_OF_A_TRANSPOSED_VALUE)
    assert run.cpu_check.passed and not run.ladder, (run.cpu_check.detail, run.ladder)
    forward = (tmp_path / "out" / "40_model_new.py").read_text()
    assert "rand_like.default(getitem, pin_memory=False)" in forward


IN_PLACE_DROPOUT_OF_A_PERMUTED_VALUE = '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.dropout = nn.Dropout(0.5, inplace=True)

    def forward(self, x):
        x = torch.log_softmax(x, dim=-2).permute(0, 1, 3, 2)
        x = 1.5 - (x + torch.zeros(1, 5, 5))
        return self.dropout(x)


def get_inputs():
    return [torch.randn(3, 2, 5, 5)]


def get_init_inputs():
    return []
'''


def test_an_in_place_dropout_of_a_permuted_value_draws_its_mask_in_place_in_eagers_layout(tmp_path):
    """`nn.Dropout(inplace=True)` decomposes into empty_like(x).bernoulli_(1 - p), which the capture holds as the
    functional bernoulli.p: that one fills a row-major result, eager's in-place draw fills x's permuted memory, so
    another element got each draw and every rung failed the float64 check (`fuseforge fuzz --seed 64121`,
    minimised). The emitted forward draws in place into eager's layout."""
    run = _run(tmp_path, IN_PLACE_DROPOUT_OF_A_PERMUTED_VALUE)
    assert run.cpu_check.passed and not run.ladder, (run.cpu_check.detail, run.ladder)
    forward = (tmp_path / "out" / "40_model_new.py").read_text()
    assert ("torch.empty_like(empty_like.permute([0, 1, 3, 2]), memory_format=torch.contiguous_format)"
            ".permute([0, 1, 3, 2]).bernoulli_(0.5)") in forward


EVAL_SUBMODULE = '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(4).eval()
        self.dropout = nn.Dropout(0.25).eval()

    def forward(self, x):
        return self.dropout(self.bn(x)) * 2.0


def get_inputs():
    return [torch.randn(3, 4, 5, 6)]


def get_init_inputs():
    return []
'''


def test_a_submodule_in_eval_mode_inside_a_train_mode_model_keeps_its_eval_behaviour(tmp_path):
    run = _run(tmp_path, EVAL_SUBMODULE)
    assert run.captured.training and run.cpu_check.passed and not run.ladder, run.cpu_check.detail
    assert not run.captured.buffer_mutations  # an eval-mode batch norm updates no running statistics


NUMBERS_AMONG_THE_INPUTS = '''
class Model(nn.Module):
    def forward(self, x, scale, n, flag):
        return torch.where(flag, torch.relu(x) * scale + n, x)


def get_inputs():
    return [torch.randn(3, 4), 0.5, 2, torch.tensor([True, False, True, False])]


def get_init_inputs():
    return []
'''


def test_python_numbers_among_the_inputs_are_built_in_and_other_values_run_the_models_own_forward(tmp_path):
    from fuseforge.load import import_model_file

    run = _run(tmp_path, NUMBERS_AMONG_THE_INPUTS)
    assert run.cpu_check.passed and not run.ladder, (run.cpu_check.detail, run.ladder)
    assert run.captured.number_inputs == {"scale": 0.5, "n": 2} and run.plan.groups
    emitted = import_model_file(tmp_path / "out" / "40_model_new.py")
    x, flag = torch.randn(3, 4), torch.tensor([True, False, True, False])
    model = emitted.ModelNew()  # other numbers: the model's own forward, no kernel is built
    assert torch.equal(model(x, 0.75, 1, flag), emitted.Model()(x, 0.75, 1, flag))


def test_a_model_whose_float64_check_cannot_fit_in_memory_says_so_in_one_line_and_goes_on(tmp_path, monkeypatch):
    from fuseforge import pipeline

    monkeypatch.setattr(pipeline, "available_bytes", lambda: 1024)  # 1 KiB free: nothing fits
    run = _run(tmp_path, RANDOM)
    assert run.cpu_check.skipped and "float64 CPU check skipped: it needs about" in run.cpu_check.skipped
    assert not run.ladder and (tmp_path / "out" / "40_model_new.py").exists()
    assert run.cpu_check.skipped in (tmp_path / "out" / "report.md").read_text()


A_LOSS_OVER_A_LARGE_INPUT = '''
class Model(nn.Module):
    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


def get_inputs():
    return [torch.rand(512, 512), torch.randint(0, 2, (512,)).float() * 2 - 1]  # batch == features: static


def get_init_inputs():
    return []
'''


def test_the_float64_check_counts_the_forwards_values_not_only_the_state_and_the_inputs(tmp_path):
    """Catches the estimate of a parameter-free model over a large input counting its inputs alone: a hinge loss over a
    32768 x 32768 tensor passed the old estimate (16 GiB against 19 free) and was killed for memory at 24 GiB, its
    float64 intermediates (the products, the differences) each as large as the input."""
    from fuseforge import pipeline
    from fuseforge.evaluate.cpu_check import float64_check_bytes

    run = _run(tmp_path, A_LOSS_OVER_A_LARGE_INPUT)
    peak, fraction = pipeline._forward_size(run)
    big = 512 * 512 * 4  # the large input in float32
    assert fraction == 1.0 and peak >= 2 * big  # the mean takes every element: no smaller batch; two values live
    # the float64 inputs twice, and four float64 copies of the forward's values (twice their float32 peak)
    assert float64_check_bytes(run.loaded, peak, fraction) >= 2 * (2 * big) + 4 * (2 * (2 * big))


TWO_CONVS = '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, bias=False)
        self.b = nn.Conv2d(8, 8, 3)

    def forward(self, x):
        y = self.a(x)  # read by the next convolution: stays NCHW, as eager runs it
        return torch.relu(self.b(y))  # read by a pointwise kernel only: channels-last


def get_inputs():
    return [torch.randn(2, 3, 12, 12)]


def get_init_inputs():
    return []
'''


def test_the_report_says_at_which_precision_each_convolution_runs_and_why(tmp_path):
    run = _run(tmp_path, TWO_CONVS)
    report = (tmp_path / "out" / "report.md").read_text()
    convs = [n.name for n in run.captured.graph.nodes if str(n.target) == "aten.conv2d.default"]
    lines = {n: next(line for line in report.splitlines() if f"({n})" in line and "Precision" in line) for n in convs}
    chosen = run.plan.channels_last
    assert len(lines) == 2 and len(chosen) == 1
    for name, line in lines.items():
        expected = "cuDNN picks its algorithm for this layout" if name in chosen else \
            "same cuDNN algorithm and precision class as eager"
        assert expected in line, line


MASKS = '''
class Model(nn.Module):
    def forward(self, x, mask):
        y = torch.where(x > 0.5, x * 2.0, x)  # a mask computed from x: it stays in the kernel's registers
        return torch.where(mask, torch.tanh(y), torch.zeros_like(y))  # a bool input read from memory


def get_inputs():
    return [torch.rand(4, 8, 16), torch.rand(4, 8, 16) > 0.5]


def get_init_inputs():
    return []
'''


def test_a_bool_input_read_from_memory_is_left_to_torch_while_a_mask_computed_in_the_kernel_is_fused(tmp_path):
    run = _run(tmp_path, MASKS)
    assert run.cpu_check.passed, run.cpu_check.detail
    kernel_inputs = {name for g in run.plan.groups for name in g.inputs}
    by_name = {n.name: n for n in run.captured.graph.nodes}
    assert all(by_name[i].meta["val"].dtype == torch.float32 for i in kernel_inputs if i in by_name)
    fused = {op for g in run.plan.groups for op in g.nodes}
    assert "gt" in fused and "where" in fused  # x > 0.5 and the first where: one kernel
    assert any("is a torch.bool tensor in memory" in w.reason for w in run.plan.not_fused)
