"""The cost model counts a convolution's FLOPs as PyTorch's own flop counter does, transposed and grouped ones
too; the suite's floor prices convolutions at the tensor cores' peak."""

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from fuseforge.cost import flops


def _captured_conv(conv: nn.Module, x: torch.Tensor):
    program = torch.export.export(conv, (x,)).run_decompositions({})
    node = next(n for n in program.graph.nodes if str(n.target).startswith("aten.conv"))
    return program, node


@pytest.mark.parametrize("conv, shape", [
    (nn.ConvTranspose3d(8, 16, 3, stride=2, padding=1, bias=False), (2, 8, 5, 6, 7)),
    (nn.ConvTranspose2d(8, 16, 4, stride=2, groups=4, bias=False), (2, 8, 5, 6)),
    (nn.Conv2d(8, 16, 3, groups=2, bias=False), (2, 8, 9, 9)),
    (nn.Conv3d(4, 6, (3, 1, 2), stride=(1, 2, 1), bias=False), (2, 4, 6, 7, 8)),
], ids=["convT3d-stride2", "convT2d-groups", "conv2d-groups", "conv3d-strided"])
def test_convolution_flops_equal_pytorchs_flop_counter(conv, shape):
    x = torch.randn(shape)
    with FlopCounterMode(display=False) as counter:
        conv(x)
    _, node = _captured_conv(conv, x)
    assert flops(node)[0] == counter.get_total_flops()


def test_the_suite_floor_prices_a_convolution_at_the_tensor_cores_peak():
    from types import SimpleNamespace

    from fuseforge.rates import TF32_FLOPS
    from fuseforge.suite.build import roofline

    conv, x = nn.Conv2d(64, 64, 3, bias=False), torch.randn(8, 64, 64, 64)
    program, node = _captured_conv(conv, x)
    captured = SimpleNamespace(graph=program.graph, user_outputs=[node.name], buffer_mutations={}, input_mutations={})
    floor = roofline(captured)
    assert floor["compute_ms"] == pytest.approx(flops(node)[0] / TF32_FLOPS * 1e3)


def test_the_suite_floor_prices_a_linear_layer_at_the_tensor_cores_peak_and_a_pointwise_op_at_its_own_rate():
    from types import SimpleNamespace

    from fuseforge.cost import is_product
    from fuseforge.rates import TF32_FLOPS
    from fuseforge.suite.build import roofline

    model, x = nn.Sequential(nn.Linear(256, 512, bias=False), nn.ReLU()), torch.randn(128, 256)
    program = torch.export.export(model, (x,)).run_decompositions({})
    calls = [n for n in program.graph.nodes if n.op == "call_function"]
    products = [n for n in calls if is_product(n)]
    assert [str(n.target) for n in products] in (["aten.mm.default"], ["aten.linear.default"])
    assert any(str(n.target) == "aten.relu.default" and not is_product(n) for n in calls)
    captured = SimpleNamespace(graph=program.graph, user_outputs=[calls[-1].name], buffer_mutations={}, input_mutations={})
    expected = sum(flops(n)[0] / (TF32_FLOPS if is_product(n) else flops(n)[1])
                   for n in calls if str(n.target) not in ("aten.t.default", "aten.permute.default"))
    assert roofline(captured)["compute_ms"] == pytest.approx(expected * 1e3)
