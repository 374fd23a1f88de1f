"""The layout step: a convolution runs channels-last exactly when every reader of its output reads NHWC."""

import json
import textwrap
from pathlib import Path

import pytest
import torch

from fuseforge.config import OptimizeConfig
from fuseforge.pipeline import optimize

HEAD = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv{dims}d(3, 6, 3)
        self.other = nn.Conv{dims}d(3, 6, 3)
        self.bn = nn.BatchNorm2d(6)
        self.gn = nn.GroupNorm(3, 6)
        self.pool = nn.MaxPool3d(2)

    def forward(self, x):
{body}

def get_inputs():
    return [torch.randn(2, 3, {size})]

def get_init_inputs():
    return []
"""

FORMS = {  # name -> (conv dims, forward body, the convolution runs channels-last)
    "channel-min": (2, "return torch.tanh(torch.amin(self.conv(x), dim=1, keepdim=True))", True),
    "pool-then-channel-sum": (3, "return torch.sigmoid(self.pool(self.conv(x))).sum(dim=1)", True),
    "batch-norm-reader": (2, "return torch.relu(self.bn(self.conv(x)))", True),
    "group-norm-reader": (2, "return torch.sigmoid(self.gn(self.conv(x))) * 2.0", True),
    "batch-norm-of-two-convolutions": (2, "return self.bn(self.conv(x) + self.other(x))", False),
    "unbiased-channel-min": (2, "return torch.amin(nn.functional.conv2d(x, self.conv.weight), dim=1)", True),
    "pointwise-reader": (2, "return torch.tanh(self.conv(x) + 1.0) * 0.5", True),
    "pointwise-of-two-convolutions": (2, "return torch.tanh(self.conv(x) + self.other(x))", False),
    "output-too": (2, "y = nn.functional.conv2d(x, self.conv.weight)\nreturn torch.amin(y, dim=1), y", False),
    "biased-output-too": (2, "y = self.conv(x)\nreturn torch.amin(y, dim=1), y", True),  # the bias add writes y
    "torch-reader": (2, "return torch.softmax(nn.functional.conv2d(x, self.conv.weight), dim=2)", False),
}


def _run(tmp_path, name, without: str | None = None):
    dims, body, _ = FORMS[name]
    model = tmp_path / f"{name.replace('-', '_')}.py"
    size = "9, 10" if dims == 2 else "6, 7, 8"
    model.write_text(HEAD.format(dims=dims, body=textwrap.indent(body, " " * 8), size=size))
    config = OptimizeConfig(model_path=model, out_dir=tmp_path / "out", gpu=False)
    return optimize(config.without_family(without) if without else config)


@pytest.mark.parametrize("name", list(FORMS))
def test_a_convolution_runs_channels_last_only_when_every_reader_reads_nhwc_and_the_result_stays_exact(name, tmp_path):
    run = _run(tmp_path, name)
    dims, _, expected = FORMS[name]
    convs = [n.name for n in run.captured.graph.nodes if str(n.target).startswith("aten.conv")]
    assert all((conv in run.plan.channels_last) is expected for conv in convs)
    fmt = "torch.channels_last" if dims == 2 else "torch.channels_last_3d"
    emitted = (tmp_path / "out" / "40_model_new.py").read_text()
    assert ("kernels.ff_channels_last(x, stream)" in emitted) is expected
    assert (f"p_conv_weight.contiguous(memory_format={fmt})" in emitted) is expected
    assert ("given its input and weight channels-last" in (tmp_path / "out" / "report.md").read_text()) is expected
    assert run.cpu_check.passed, run.cpu_check.detail  # the emitted forward, channels-last included, in float64


def test_without_the_channel_reductions_a_convolution_read_by_a_channel_reduction_runs_contiguous(tmp_path):
    run = _run(tmp_path, "unbiased-channel-min", without="channel_reductions")
    assert run.plan.channels_last == frozenset()
    assert "memory_format" not in (tmp_path / "out" / "40_model_new.py").read_text()


@pytest.mark.gpu
def test_on_a_gpu_the_channels_last_conversion_keeps_every_value_at_odd_sizes(tmp_path):
    from torch.utils.cpp_extension import load_inline

    from fuseforge.codegen import generate

    run = _run(tmp_path, "channel-min")
    ext = generate(run.plan, run.captured.graph, "layout_test.py")
    assert "ff_channels_last" in ext.functions
    kernels = load_inline(name=ext.name, cpp_sources=[ext.binding], cuda_sources=[ext.cuda],
                          functions=list(ext.functions), extra_cflags=list(ext.cflags), extra_cuda_cflags=list(ext.nvcc_flags),
                          no_implicit_headers=True)
    stream = torch.cuda.current_stream().cuda_stream
    for shape in [(1, 1, 5, 7), (2, 3, 9, 10), (2, 16, 33, 31), (3, 33, 17, 5), (1, 70, 64, 65), (2, 5, 3, 4, 7),
                  (3, 2, 70, 70), (0, 3, 4, 4)]:
        x = torch.randn(shape, device="cuda")
        x.view(-1)[::97] = float("nan")
        fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
        got = kernels.ff_channels_last(x, stream)
        assert got.is_contiguous(memory_format=fmt) and got.shape == x.shape, shape
        assert torch.equal(got.nan_to_num(7.0), x.nan_to_num(7.0)), shape
        assert torch.equal(got.isnan(), x.isnan()), shape
    strided = torch.randn(2, 4, 6, 8, device="cuda")[:, :, ::2]  # not contiguous: PyTorch converts it
    assert torch.equal(kernels.ff_channels_last(strided, stream), strided)


# --- the precision step after the layout (layout_precision.py) ----------------------------------------------

def test_the_precision_step_measures_the_convolution_the_layout_chose_on_its_own_shapes(tmp_path, monkeypatch):
    """The call measured is the one the graph makes (shapes, stride, groups); here measured on the CPU in a
    child process, as the GPU run measures it on CUDA."""
    from fuseforge import layout_precision
    from fuseforge.layout_precision import conv_call, measured

    run = _run(tmp_path, "pool-then-channel-sum")
    (name,) = run.plan.channels_last
    node = next(n for n in run.captured.graph.nodes if n.name == name)
    call = conv_call(node)
    assert (call.input_shape[1:], call.weight_shape, call.stride, call.groups, call.transposed, call.bias) == \
        ((3, 6, 7, 8), (6, 3, 3, 3, 3), (1, 1, 1), 1, False, False)  # its bias add is in the pool kernel
    requests, child = [], layout_precision.subprocess.run

    def spy(argv, **kwargs):  # the request as the child reads it: asked with a bias, so both times are measured
        requests.append(json.loads(Path(argv[argv.index("--calls") + 1]).read_text()))
        return child(argv, **kwargs)

    monkeypatch.setattr(layout_precision.subprocess, "run", spy)
    rows = measured(run.plan.channels_last, run.captured.graph, tmp_path, device="cpu")
    assert set(rows) == {name} and rows[name]["class"] == "fp32" and rows[name]["error_channels_last"] is not None
    # eager's convolution has its bias, the plan's has none: the cost model needs both times (a request without the
    # bias priced eager's convolutions without PyTorch's bias pass: 67's speedup predicted 0.76x of the measured)
    assert [{k: r[name][k] for k in ("input_shape", "bias")} for r in requests] == [
        {"input_shape": list(call.input_shape), "bias": True}]
    assert (tmp_path / "25_conv_precision.json").is_file()
    # the next rung asks again: answered from this process's measurements, no second child process
    monkeypatch.setattr(layout_precision.subprocess, "run", lambda *a, **k: pytest.fail("measured twice"))
    again = tmp_path / "again"
    again.mkdir()
    assert measured(run.plan.channels_last, run.captured.graph, again, device="cpu") == rows
    assert json.loads((again / "25_conv_precision.json").read_text()) == rows


@pytest.mark.gpu
def test_on_a_gpu_the_precision_step_measures_both_layouts_of_the_chosen_convolution(tmp_path):
    from fuseforge.layout_precision import measured

    run = _run(tmp_path, "group-norm-reader")
    rows = measured(run.plan.channels_last, run.captured.graph, tmp_path, device="cuda")
    (row,) = rows.values()
    assert 0 < row["error_nchw"] < 1e-2 and 0 < row["error_channels_last"] < 1e-2
    assert row["class"] in ("fp32", "tf32") and isinstance(row["channels_last_in_class"], bool)
    assert all(row[k] > 0 for k in ("ms_nchw", "ms_nchw_no_bias", "ms_channels_last", "ms_channels_last_no_bias",
                                    "ms_to_channels_last"))  # timed: the layout choice and the cost model use them


def test_on_a_gpu_plan_a_convolution_out_of_class_channels_last_runs_in_eagers_layout(tmp_path, monkeypatch):
    """Catches a plan that keeps channels-last for a convolution whose channels-last algorithm is less precise
    than eager's (it would fail verification and cost the whole model its layout change), and a failed
    measurement taken as 'in class'. The measurement is stubbed; the GPU runs the real one."""
    import dataclasses

    from fuseforge import layout_precision, pipeline
    from fuseforge.report import _measured_precision

    run = _run(tmp_path, "batch-norm-reader")
    (name,) = run.plan.channels_last
    run.config = dataclasses.replace(run.config, gpu=True)
    out_of_class = {name: {"error_nchw": 2e-7, "error_channels_last": 3e-4, "class": "fp32",
                           "class_channels_last": "tf32", "channels_last_in_class": False}}
    monkeypatch.setattr(layout_precision, "measured", lambda names, graph, out: out_of_class)
    pipeline.stage_partition(run)
    assert run.plan.channels_last == frozenset() and run.conv_precision == out_of_class
    assert "channels-last 3.0e-04 (tf32-class). Channels-last not taken" in _measured_precision(run, name)

    in_class = {name: {**out_of_class[name], "error_channels_last": 2.5e-7, "channels_last_in_class": True}}
    monkeypatch.setattr(layout_precision, "measured", lambda names, graph, out: in_class)
    pipeline.stage_partition(run)
    assert run.plan.channels_last == frozenset({name})

    def broken(names, graph, out):
        raise layout_precision.subprocess.CalledProcessError(1, "probe", stderr="RuntimeError: no GPU\n")
    monkeypatch.setattr(layout_precision, "measured", broken)
    pipeline.stage_partition(run)
    assert run.plan.channels_last == frozenset() and run.conv_precision == {"error": "RuntimeError: no GPU"}
    assert any("could not be measured (RuntimeError: no GPU)" in n for n in run.notes)  # said in the report


def _timed(row: dict, nchw: float, channels_last: float, to_channels_last: float) -> dict:
    """A measurement row with times (ms), the bias pass 0.1 ms."""
    return {**row, "ms_nchw": nchw + 0.1, "ms_nchw_no_bias": nchw, "ms_channels_last": channels_last + 0.1,
            "ms_channels_last_no_bias": channels_last, "ms_to_channels_last": to_channels_last}


def test_on_a_gpu_plan_a_convolution_measured_slower_channels_last_runs_in_eagers_layout(tmp_path, monkeypatch):
    """Catches a plan that runs a convolution channels-last where cuDNN's channels-last call, with the input's
    conversion, was measured slower than its NCHW one (it is, on some shapes). The measurement is stubbed."""
    import dataclasses

    from fuseforge import layout_precision, pipeline
    from fuseforge.report import _measured_precision

    run = _run(tmp_path, "batch-norm-reader")
    (name,) = run.plan.channels_last
    # the conv kernels off: priced against the stub's cuDNN times (1 ms for this small convolution), the direct
    # kernel would take the convolution, and no torch convolution would be left for the layout step
    run.config = dataclasses.replace(run.config, gpu=True, families=run.config.families - {"conv"})
    in_class = {"error_nchw": 2e-4, "error_channels_last": 3e-4, "class": "tf32", "class_channels_last": "tf32",
                "channels_last_in_class": True}
    asked = []

    def stub(times):
        def measured(names, graph, out):
            asked.append(set(names))
            return {name: _timed(in_class, *times)}
        return measured

    monkeypatch.setattr(layout_precision, "measured", stub((1.0, 1.0, 0.2)))  # 1.0 + the conversions > 1.0
    pipeline.stage_partition(run)
    assert run.plan.channels_last == frozenset() and asked == [{name}]
    said = _measured_precision(run, name)
    assert "NCHW 1.000 ms, channels-last 1.000 ms + 0.0" in said and "not taken: measured slower" in said
    monkeypatch.setattr(layout_precision, "measured", stub((1.0, 0.5, 0.2)))  # PyTorch's conversion is not ours
    pipeline.stage_partition(run)
    assert run.plan.channels_last == frozenset({name})


def test_the_cost_model_prices_eagers_and_the_plans_convolutions_at_their_measured_times(tmp_path):
    """Catches a cost model that keeps the rates' price for a convolution measured on the GPU: eager's call (with
    its bias pass, NCHW) and the plan's (its bias in the kernel after it; channels-last after the conversions)."""
    from fuseforge.cost import estimate, measurement_key
    from fuseforge.layout_precision import conversion_ms

    run = _run(tmp_path, "batch-norm-reader")
    (name,) = run.plan.channels_last
    graph = run.captured.graph
    node = next(n for n in graph.nodes if n.name == name)
    row = _timed({"class": "tf32"}, 7.0, 3.0, 1.0)  # far from anything the rates would price these tiny shapes at
    priced = estimate(run.eager_cost, run.captured, run.plan)
    timed = estimate(run.eager_cost, run.captured, run.plan, {name: row})
    (conv,) = run.eager_cost.convs
    assert conv.bias and conv.key == measurement_key(node)  # eager's biased call and the plan's share the key
    assert timed.eager_gpu_s - priced.eager_gpu_s == pytest.approx(7.1e-3 - conv.seconds)  # its GPU work
    # the plan's convolution (a torch call): 3.0 ms channels-last, no bias, + the extension's conversions of its
    # input and weight (not PyTorch's, the row's 1.0 ms), in place of its price
    change = timed.plan_torch_s - priced.plan_torch_s + _plan_conv_price(run, name)
    assert change == pytest.approx(3.0e-3 + conversion_ms(node) / 1e3) and 0 < conversion_ms(node) < 0.01
    assert timed.plan_s >= timed.plan_torch_s
    untimed = estimate(run.eager_cost, run.captured, run.plan, {name: {"class": "tf32"}})  # a CPU measurement
    assert (untimed.eager_s, untimed.eager_gpu_s, untimed.plan_s) == (priced.eager_s, priced.eager_gpu_s, priced.plan_s)


def _plan_conv_price(run, name):
    from fuseforge.cost import LAUNCH_S, channels_last_conv_seconds

    node = next(n for n in run.captured.graph.nodes if n.name == name)
    return channels_last_conv_seconds(node) + LAUNCH_S
