"""Row kernels along the channel axis: softmax, log_softmax and logsumexp over dim 1 of [N, C, *S].

A row is the C values of one (n, s), S apart; one thread per row. Plan tests (the forms, the operand
classes against the channel axis, what stays with the channel-reduction kernels or torch), the float64
reference against torch, the CPU check of a whole model, nvcc and g++ compile checks, and on a GPU the
generated kernels at other sizes than traced (one channel, odd positions, more channels than a thread caches).
"""


import pytest
import torch
from compile_check import GXX, NVCC, assert_compiles_for_hopper_without_spills, compile_binding
from test_partition import _captured
from test_row_trailing_axes import _at, load_kernels, mismatches
from torch import nn

from fuseforge.codegen import generate
from fuseforge.config import OptimizeConfig
from fuseforge.evaluate.cpu_check import run_kernel_reference
from fuseforge.families import named
from fuseforge.families.rows import table as row_table
from fuseforge.families.rows.table import row_op_reason
from fuseforge.partition import partition
from fuseforge.plan import KernelStep

TRACED = (2, 3, 5, 7)  # N, C, H, W (as test_row_trailing_axes: each size names its axis)


class ChannelRows(nn.Module):
    """A softmax over the channels with a per-channel prologue and an epilogue; a log_softmax over the
    channels of a 5-D view-free input; a logsumexp over the channels kept, plus a per-position input; one
    not kept, plus a per-position bias broadcast against [N, H, W]."""

    def __init__(self, c=3, h=5, w=7):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(c, 1, 1))
        self.plane = nn.Parameter(torch.randn(h, w))

    def forward(self, x, y, z):
        a = torch.tanh(torch.softmax(x * 2.0 + self.bias, dim=1)) * 0.5
        b = torch.log_softmax(z, dim=1)
        c = torch.logsumexp(torch.relu(x), dim=1, keepdim=True) + y
        d = torch.logsumexp(x, dim=-3) - self.plane
        return a, b, c, d


def _channel_rows():
    inputs = (torch.randn(*TRACED), torch.randn(2, 1, 5, 7), torch.randn(2, 3, 4, 5, 7))
    captured = _captured(ChannelRows(), *inputs)
    return captured, partition(captured.graph, named("rows"))


def _row(plan, op):
    (group,) = [g for g in plan.groups if g.kind == "rows" and g.spec.reduction.op == op and g.spec.reduction.data != "z"]
    return group


def test_softmax_and_logsumexp_over_the_channels_are_row_kernels_with_their_neighbours():
    _, plan = _channel_rows()
    assert all(isinstance(s, KernelStep) for s in plan.steps)
    assert all(g.spec.reduction.channels for g in plan.groups)
    assert sorted(g.spec.reduction.op for g in plan.groups) == ["log_softmax", "logsumexp", "logsumexp", "softmax"]
    assert [n.rstrip("_0123456789") for n in _row(plan, "softmax").nodes] == ["mul", "add", "softmax", "tanh", "mul"]
    assert plan.not_fused == []


def test_inputs_are_read_per_channel_per_position_or_against_the_per_position_shape():
    _, plan = _channel_rows()
    assert dict(_row(plan, "softmax").spec.operands) == {"x": "full", "p_bias": "col"}
    (kept, dropped) = sorted((g for g in plan.groups if g.spec.reduction.op == "logsumexp"),
                             key=lambda g: not g.spec.reduction.keepdim)
    assert dict(kept.spec.operands) == {"x": "full", "y": "row"}
    assert dict(dropped.spec.operands) == {"x": "full", "p_plane": "row-flat"}


def test_amax_over_the_channels_is_not_a_row_kernel_nor_a_softmax_over_another_axis():
    class Others(nn.Module):
        def forward(self, x):
            return torch.amax(x, dim=1), torch.softmax(x, dim=2)

    captured = _captured(Others(), torch.randn(*TRACED))
    by_name = {n.name: n for n in captured.graph.nodes}
    assert "reduces dims [1], not the last axis" in row_op_reason(by_name["amax"])
    assert "reduces dims 2, not the last axis" in row_op_reason(by_name["softmax"])


@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 5, 7), (2, 3, 4, 5, 7)])
@pytest.mark.parametrize("op, keepdim", [("softmax", True), ("log_softmax", True), ("logsumexp", True),
                                         ("logsumexp", False)])
def test_the_reference_over_the_channels_equals_torch_in_float64(op, keepdim, shape):
    torch.manual_seed(0)
    v = torch.randn(*shape, dtype=torch.float64) * 3
    v[1, :, 0] = float("-inf")  # whole rows of -inf
    red = row_table.RowReduction(op, "", op != "logsumexp", "v", keepdim=keepdim, channels=True)
    want = {"softmax": lambda: torch.softmax(v, 1), "log_softmax": lambda: torch.log_softmax(v, 1),
            "logsumexp": lambda: torch.logsumexp(v, 1, keepdim=keepdim)}[op]()
    got = row_table.reference(red, v, {})
    assert got.shape == want.shape
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)


def test_the_row_reference_refuses_a_per_channel_bias_of_the_wrong_count():
    captured, plan = _channel_rows()
    by_name = {n.name: n for n in captured.graph.nodes}
    with pytest.raises(ValueError, match="p_bias"):
        run_kernel_reference(_row(plan, "softmax"), by_name, {"x": torch.randn(*TRACED), "p_bias": torch.randn(4, 1, 1)})


def test_a_conv_softmax_model_passes_the_float64_cpu_check_with_a_channel_row_kernel(tmp_path):
    from fuseforge.pipeline import optimize

    model = tmp_path / "conv_softmax.py"
    model.write_text(
        "import torch\nfrom torch import nn\n\n"
        "class Model(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.conv = nn.Conv3d(3, 6, 3)\n\n"
        "    def forward(self, x):\n"
        "        y = torch.softmax(torch.relu(self.conv(x)), dim=1)\n"
        "        return y.mean(dim=(2, 3, 4))\n\n"
        "def get_inputs():\n    return [torch.randn(2, 3, 6, 7, 8)]\n\n"
        "def get_init_inputs():\n    return []\n")
    run = optimize(OptimizeConfig(model_path=model, out_dir=tmp_path / "out", gpu=False, families=frozenset({"rows"})))
    overs = [s.group.spec.reduction.over for s in run.plan.steps if isinstance(s, KernelStep) and s.group.kind == "rows"]
    assert overs == ["over the channel axis", "over the last 3 axes"]
    assert run.cpu_check.passed and run.cpu_check.max_rel_error <= 1e-9, run.cpu_check.detail


# ---------------------------------------------------------------------------------------- compile

def _generated():
    captured, plan = _channel_rows()
    return captured, plan, generate(plan, captured.graph, "channel_rows.py")


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_the_channel_row_kernels_compile_for_hopper_without_warnings_or_spills(tmp_path):
    _, _, ext = _generated()
    assert ext.cuda.count("ff_row_channels_launch(op") == 4
    assert_compiles_for_hopper_without_spills(ext.cuda, tmp_path)


@pytest.mark.skipif(GXX is None, reason="g++ is not installed")
def test_the_channel_row_binding_compiles_against_torch_headers(tmp_path):
    _, _, ext = _generated()
    result = compile_binding(ext, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]


# ---------------------------------------------------------------------------------------- GPU

# N, C, H, W: one channel, one position, odd positions, 8 / 32 / 33 / 64 channels (cached paths and the re-read);
# 129 positions (the channels-last kernel's 128-row tiles, one spanning two samples); 256 channels (its largest
# tile, past 48 KB of shared memory) and 257 (read contiguous again)
SIZES = [(1, 1, 1, 1), (2, 3, 5, 7), (1, 8, 1, 1), (3, 5, 9, 11), (2, 32, 17, 9), (2, 33, 5, 7), (4, 16, 32, 32),
         (2, 64, 16, 16), (3, 7, 3, 43), (2, 256, 5, 7), (2, 257, 3, 5)]


@pytest.mark.gpu
def test_the_channel_row_kernels_match_float64_at_other_sizes_like_eager_does():
    captured, plan, ext = _generated()
    kernels = load_kernels(ext)
    by_name = {n.name: n for n in captured.graph.nodes}
    failures = []
    for group in plan.groups:
        for sizes in SIZES:
            torch.manual_seed(sum(sizes) * 7919)
            inputs = {}
            for name, cls in group.spec.operands:
                traced = tuple(by_name[name].meta["val"].shape)
                # z is 5-D [N, C, 4, H, W]: its extra axis (traced 4) stays 4
                shape = _at(traced, sizes) if name != "z" else (*_at(traced[:2], sizes), 4, *_at(traced[3:], sizes))
                inputs[name] = torch.randn(shape, device="cuda") * 2 + (3 if cls == "full" else 0)
            failures += mismatches(kernels, group, by_name, inputs, str(sizes))
            # the full input channels-last (a channels-last convolution's output): read as it is up to 256 channels
            nhwc = {k: _channels_last(v) if dict(group.spec.operands)[k] == "full" else v for k, v in inputs.items()}
            failures += mismatches(kernels, group, by_name, nhwc, f"{sizes} channels-last")
    assert not failures, "\n".join(failures)


def _channels_last(t):
    return t.contiguous(memory_format={4: torch.channels_last, 5: torch.channels_last_3d}[t.dim()])


def test_a_convolution_whose_one_reader_is_a_channel_softmax_runs_channels_last_up_to_256_channels():
    from fuseforge.families import FAMILIES
    from fuseforge.layout import channels_last_convs
    from fuseforge.rewrite import rewrite

    class ConvSoftmax(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.conv = nn.Conv2d(3, channels, 3)

        def forward(self, x):
            return torch.sigmoid(torch.softmax(self.conv(x), dim=1))

    chosen = {}
    for channels in (64, 256, 257):
        captured = _captured(ConvSoftmax(channels), torch.randn(2, 3, 8, 8))
        rewrite(captured.graph, captured)
        plan = partition(captured.graph, FAMILIES)
        (row,) = [g for g in plan.groups if g.kind == "rows"]
        assert row.spec.reduction.channels and [c for _, c in row.spec.operands].count("full") == 1
        chosen[channels] = bool(channels_last_convs(plan, captured.graph))
        binding = generate(plan, captured.graph, "conv_softmax.py").binding
        assert "ff_row_reads_nhwc(" in binding  # the binding reads a channels-last input as it is
    assert chosen == {64: True, 256: True, 257: False}
    # the layout step's limit is the binding's: past it the binding would copy the channels-last input
    from fuseforge.families.rows import NHWC_MAX_CHANNELS
    from fuseforge.families.rows.runtime import ROW_BINDING_RUNTIME
    assert NHWC_MAX_CHANNELS == 256 and f"kFFRowNhwcMaxChannels = {NHWC_MAX_CHANNELS};" in ROW_BINDING_RUNTIME
