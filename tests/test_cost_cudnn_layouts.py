"""The cost model's price of cuDNN's convolutions in both layouts, transposed ones included, against the times
measured on an H100 (bench/results/2026-11-27c_h100/conv_times.json: every convolution of the problem models, without
its bias, NCHW and channels-last). Each convolution is captured as the pipeline captures a model (torch.export on the
meta device) and priced by `cost.conv_seconds` in the layout it was timed in."""

import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from fuseforge.cost import conv_seconds
from fuseforge.rates import BIAS_PASS_S, is_short_dot

MEASURED = json.loads((Path(__file__).parent.parent / "bench/results/2026-11-27c_h100/conv_times.json").read_text())


def _covered(row: dict) -> bool:
    """TF32-class convolutions (eager's class on most shapes), but for the ranges rates.py prices otherwise or
    says it does not cover: short dot products (at most 8 input channels x 192 products: priced at the rate of
    the fp32-class ones, which the direct kernel takes; a TF32-class one runs about twice as fast) and transposed
    convolutions with at most 8 input or 16 output channels."""
    if row["class"] != "tf32":
        return False
    if row["transposed"]:
        return row["input_shape"][1] > 8 and row["weight_shape"][1] * row["groups"] > 16
    channels = row["weight_shape"][1]
    return not is_short_dot(channels, channels * math.prod(row["weight_shape"][2:]))


ROWS = [r for r in MEASURED["convolutions"] if _covered(r)]


def _captured_conv(row: dict, bias: bool):
    dims = len(row["input_shape"]) - 2
    w = row["weight_shape"]
    if row["transposed"]:
        cls = {2: nn.ConvTranspose2d, 3: nn.ConvTranspose3d}[dims]
        module = cls(w[0], w[1] * row["groups"], w[2:], stride=row["stride"], padding=row["padding"],
                     output_padding=row["output_padding"], groups=row["groups"], bias=bias,
                     dilation=row["dilation"])
    else:
        cls = {2: nn.Conv2d, 3: nn.Conv3d}[dims]
        module = cls(w[1] * row["groups"], w[0], w[2:], stride=row["stride"], padding=row["padding"],
                     dilation=row["dilation"], groups=row["groups"], bias=bias)
    with torch.device("meta"):
        module, x = module.to("meta"), torch.empty(row["input_shape"])
    program = torch.export.export(module, (x,)).run_decompositions({})
    [node] = [n for n in program.graph.nodes if str(n.target).startswith("aten.conv")]
    return node


def test_the_table_covers_both_kinds_and_dimensions():
    kinds = {(r["transposed"], len(r["input_shape"]) - 2) for r in ROWS}
    assert kinds == {(False, 2), (False, 3), (True, 2), (True, 3)} and len(ROWS) >= 20


@pytest.mark.parametrize("row", ROWS, ids=[r["model"].split(".")[0] for r in ROWS])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_a_convolution_without_its_bias_is_priced_within_25_percent_of_its_h100_time_in_its_layout(
        row, channels_last):
    measured = row["ms_channels_last_no_bias" if channels_last else "ms_nchw_no_bias"]
    priced = conv_seconds(_captured_conv(row, bias=False), channels_last=channels_last) * 1e3
    assert priced == pytest.approx(measured, rel=0.25)


def test_channels_last_is_priced_at_about_half_of_nchw_for_a_64_channel_3x3_convolution():
    row = next(r for r in ROWS if not r["transposed"] and r["weight_shape"][1:] == [64, 3, 3])
    node = _captured_conv(row, bias=False)
    assert 0.4 < conv_seconds(node, channels_last=True) / conv_seconds(node) < 0.6


def test_a_bias_adds_pytorchs_bias_pass_to_a_transposed_convolution():
    row = next(r for r in ROWS if r["transposed"])
    with_bias, without = _captured_conv(row, bias=True), _captured_conv(row, bias=False)
    outputs = math.prod(int(s) for s in with_bias.meta["val"].shape)
    assert conv_seconds(with_bias) - conv_seconds(without) == pytest.approx(outputs * BIAS_PASS_S, rel=0.01)
