"""The cost model's price of eager's cuDNN convolutions (not transposed, TF32-class: PyTorch's default flags) against
the times measured on an H100: each convolution is captured as the pipeline captures a model (torch.export, on the
meta device: no data) and priced by `eager_cost`, as `stage_capture` prices a model's eager forward."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from fuseforge.cost import eager_cost

# (input, weight, padding, ms): F.conv2d/conv3d(x, w, b, stride=1, padding) with its bias, NCHW, timed on an H100
# (torch 2.11, cuDNN; bench/results/2026-11-27b_h100/conv_igemm/run4.json, ms.cudnn_conv of each shape; every one
# TF32-class, bench/results/2026-11-25b_h100/conv_precision.json). The shapes are the problem models' convolutions,
# a transposed one as its equivalent convolution.
H100_CUDNN_TF32 = [
    ((128, 64, 128, 128), (128, 64, 3, 3), 0, 2.878),  # 17
    ((64, 64, 256, 256), (128, 64, 3, 3), 0, 5.900),  # 32
    ((64, 64, 128, 128), (128, 64, 3, 3), 0, 1.454),  # 52
    ((4, 32, 32, 128, 128), (64, 32, 3, 3, 3), 1, 2.270),  # 43
    ((64, 8, 32, 64, 64), (32, 8, 3, 3, 3), 0, 3.134),  # 7
    ((128, 64, 256, 256), (64, 64, 3, 3), 1, 7.488),  # 10, transposed
    ((16, 64, 512, 512), (128, 64, 3, 3), 2, 5.959),  # 42, transposed
    ((16, 64, 32, 32, 32), (128, 64, 3, 3, 3), 2, 1.190),  # 61, transposed
    ((16, 64, 16, 32, 32), (128, 64, 5, 5, 5), 4, 4.026),  # 77, transposed
    ((64, 32, 128, 128), (64, 32, 3, 3), 1, 0.751),  # conv2d_batchnorm_relu
    ((64, 16, 256, 256), (64, 16, 3, 3), 0, 2.844),  # conv2d_channelmin_tanh
    ((32, 16, 256, 256), (64, 16, 3, 3), 0, 1.443),  # conv2d_groupnorm_hardswish
    ((128, 8, 128, 128), (128, 8, 3, 3), 1, 1.673),  # conv2d_avgpool_linear
    ((32, 4, 18, 66, 66), (16, 4, 3, 3, 3), 0, 0.529),  # conv3d_maxpool_sigmoid_sum
]


def _eager_ms(x_shape: tuple, w_shape: tuple, padding: int) -> float:
    """The cost model's eager time of conv(x, w, b, padding=padding), the convolution captured with its bias."""
    cls = {4: nn.Conv2d, 5: nn.Conv3d}[len(x_shape)]
    with torch.device("meta"):
        conv, x = cls(w_shape[1], w_shape[0], w_shape[2:], padding=padding), torch.empty(x_shape)
    program = torch.export.export(conv, (x,)).run_decompositions({})
    calls = [n for n in program.graph.nodes if n.op == "call_function"]
    assert [str(n.target).startswith("aten.conv") for n in calls] == [True]
    captured = SimpleNamespace(graph=program.graph, user_outputs=[calls[0].name], buffer_mutations={}, input_mutations={})
    return eager_cost(captured).seconds * 1e3


@pytest.mark.parametrize("x_shape, w_shape, padding, measured_ms", H100_CUDNN_TF32,
                         ids=[f"{'x'.join(map(str, x))}-k{w[0]}-{'x'.join(map(str, w[2:]))}-p{p}"
                              for x, w, p, _ in H100_CUDNN_TF32])
def test_the_cost_model_prices_cudnn_tf32_convolutions_within_20_percent_of_the_h100_measurements(
        x_shape, w_shape, padding, measured_ms):
    assert _eager_ms(x_shape, w_shape, padding) == pytest.approx(measured_ms, rel=0.20)


def test_a_convolution_without_a_bias_is_priced_without_pytorchs_bias_pass():
    from fuseforge.rates import BIAS_PASS_S

    x_shape, w_shape = (64, 16, 256, 256), (64, 16, 3, 3)
    with torch.device("meta"):
        conv, x = nn.Conv2d(16, 64, 3, bias=False), torch.empty(x_shape)
    program = torch.export.export(conv, (x,)).run_decompositions({})
    node = next(n for n in program.graph.nodes if str(n.target).startswith("aten.conv"))
    captured = SimpleNamespace(graph=program.graph, user_outputs=[node.name], buffer_mutations={}, input_mutations={})
    outputs = 64 * 64 * 254 * 254
    assert _eager_ms(x_shape, w_shape, 0) - eager_cost(captured).seconds * 1e3 == pytest.approx(
        outputs * BIAS_PASS_S * 1e3, rel=1e-3)
