"""The per-convolution precision probe (fuseforge/evaluate/conv_precision.py): it finds every convolution a
forward calls, and measures each one's error vs float64 in NCHW and channels-last (GPU numbers come from
the H100; the CPU runs here check the mechanics and the classification)."""

import dataclasses
import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fuseforge.evaluate import conv_precision
from fuseforge.evaluate.conv_precision import ConvCall, convolutions, measure


class _Convs(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose3d(4, 2, 2, stride=2, output_padding=1, bias=False)

    def forward(self, x, v):
        y = self.conv(x)
        y = F.conv2d(y, torch.ones(8, 4, 1, 1, device=y.device), groups=2) + self.conv(x)
        return y, self.up(v), self.up(v)


def test_every_distinct_convolution_of_a_forward_is_found_with_its_arguments():
    with torch.device("meta"):
        model = _Convs()
        calls = convolutions(model, [torch.empty(2, 3, 9, 9), torch.empty(2, 4, 3, 3, 3)])
    assert [(c.input_shape, c.weight_shape, c.groups, c.transposed) for c in calls] == [
        ((2, 3, 9, 9), (8, 3, 3, 3), 1, False), ((2, 8, 5, 5), (8, 4, 1, 1), 2, False),
        ((2, 4, 3, 3, 3), (4, 2, 2, 2, 2), 1, True)]  # the repeated calls once each
    assert calls[0].stride == (2, 2) and calls[0].padding == (1, 1) and calls[0].bias
    assert calls[2].output_padding == (1, 1, 1) and not calls[2].bias


def test_a_cpu_fp32_convolution_is_fp32_class_in_both_layouts_and_a_1d_one_has_no_channels_last_form():
    call = ConvCall((4, 8, 12, 12), (16, 8, 3, 3), True, (1, 1), (1, 1), (1, 1), False, (0, 0), 1)
    row = measure(call, torch.device("cpu"))
    assert row["class"] == "fp32" and 0 < row["error_nchw"] < 1e-5 and row["channels_last_in_class"] is not None
    flat = ConvCall((2, 4, 30), (6, 4, 5), False, (1,), (0,), (1,), False, (0,), 1)
    row = measure(flat, torch.device("cpu"))
    assert row["error_channels_last"] is None and row["channels_last_in_class"] is None


def test_a_channels_last_call_that_loses_precision_is_out_of_class(monkeypatch):
    """What a TF32 algorithm does to a convolution eager runs in fp32 (emulated: the channels-last result is
    perturbed by 1e-3 of its RMS)."""
    call = ConvCall((4, 8, 12, 12), (16, 8, 3, 3), False, (1, 1), (1, 1), (1, 1), False, (0, 0), 1)
    run = ConvCall.run

    def tf32_like(self, x, w, b):
        out = run(self, x, w, b)
        if x.dtype == torch.float32 and x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
            out = out + 1e-3 * out.square().mean().sqrt() * torch.randn_like(out)
        return out

    monkeypatch.setattr(ConvCall, "run", tf32_like)
    row = measure(call, torch.device("cpu"))
    assert row["class"] == "fp32" and row["class_channels_last"] == "tf32"
    assert row["channels_last_in_class"] is False


def test_the_command_writes_one_row_per_convolution_of_each_model(tmp_path):
    model = tmp_path / "conv_model.py"
    model.write_text("import torch\nfrom torch import nn\n\nclass Model(nn.Module):\n"
                     "    def __init__(self):\n        super().__init__()\n        self.c = nn.Conv2d(3, 4, 3)\n\n"
                     "    def forward(self, x):\n        return torch.relu(self.c(x))\n\n"
                     "def get_inputs():\n    return [torch.rand(2, 3, 10, 10)]\n\n"
                     "def get_init_inputs():\n    return []\n")
    out = tmp_path / "precision.json"
    result = subprocess.run([sys.executable, "-m", "fuseforge.evaluate.conv_precision", str(model), "--device", "cpu",
                             "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = json.loads(out.read_text())["convolutions"]
    assert [(r["model"], tuple(r["input_shape"]), r["class"]) for r in rows] == [("conv_model.py", (2, 3, 10, 10), "fp32")]
    assert "conv_model.py: conv2d (2, 3, 10, 10) -> fp32" in result.stdout
    assert conv_precision.FP32_CLASS < 1e-4


def test_channels_last_stays_in_class_in_the_same_class_or_within_the_verifiers_bound():
    """Catches a rule that drops channels-last for two TF32 algorithms that differ by chance (a slower plan
    for nothing), and one that keeps it where an exact fp32 convolution would become TF32."""
    from fuseforge.evaluate.conv_precision import stays_in_class

    assert stays_in_class(3e-4, 9e-4)  # both TF32-class
    assert stays_in_class(2e-7, 1e-6)  # both fp32-class
    assert not stays_in_class(2e-7, 3e-4)  # fp32 -> TF32: the verifier would fail it
    assert stays_in_class(1.8e-5, 3.2e-5)  # across the class line, within 2x eager's + the floor


def test_timing_is_asked_for_and_cuda_only_so_the_plan_steps_rows_carry_no_times():
    call = ConvCall((2, 8, 12, 12), (16, 8, 3, 3), True, (1, 1), (1, 1), (1, 1), False, (0, 0), 1)
    assert "ms_nchw" not in measure(call, torch.device("cpu"), timed=True)  # no CUDA events on the CPU
    assert "ms_nchw" not in measure(call, torch.device("cpu"))


@pytest.mark.gpu
def test_a_timed_measurement_gives_each_layouts_time_on_cuda():
    call = ConvCall((8, 32, 64, 64), (64, 32, 3, 3), True, (1, 1), (1, 1), (1, 1), False, (0, 0), 1)
    row = measure(call, torch.device("cuda"), timed=True)
    assert 0 < row["ms_nchw"] < 100 and 0 < row["ms_channels_last"] < 100
    assert 0 < row["ms_nchw_no_bias"] < 100 and 0 < row["ms_channels_last_no_bias"] < 100
    assert 0 < row["ms_to_channels_last"] < 100
    assert "ms_nchw" not in measure(call, torch.device("cuda"))


@pytest.mark.parametrize("flags, timed", [(["--time"], True), ([], False)])
def test_the_plans_request_of_named_calls_is_timed_when_it_asks_for_times(tmp_path, monkeypatch, flags, timed):
    """Catches a `--calls` request (the plan's layout step) that drops `--time`: its rows then carry no times, the
    layout keeps every in-class channels-last convolution unmeasured and the cost model prices cuDNN by the rates."""
    call = ConvCall((2, 8, 12, 12), (16, 8, 3, 3), True, (1, 1), (1, 1), (1, 1), False, (0, 0), 1)
    asked = []
    monkeypatch.setattr(conv_precision, "measure", lambda c, device, timed=False: asked.append(timed) or {"c": 1})
    request, out = tmp_path / "calls.json", tmp_path / "rows.json"
    request.write_text(json.dumps({"conv": dataclasses.asdict(call)}))
    assert conv_precision.main(["--calls", str(request), "--device", "cpu", "--out", str(out), *flags]) == 0
    assert asked == [timed] and json.loads(out.read_text()) == {"conv": {"c": 1}}
