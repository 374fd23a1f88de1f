"""A matrix product with few output columns reads its large operand at cuBLAS's measured thin-product rate
(`rates.THIN_PRODUCT_BANDWIDTH`, three quarters of a copy), not at the copy rate: one column (a matrix-vector
product) and a wide product keep the usual price."""

import pytest
import torch
from test_partition import _captured
from torch import nn

from fuseforge.cost import eager_cost, is_thin_product
from fuseforge.rates import BANDWIDTH, LAUNCH_S, THIN_PRODUCT_BANDWIDTH


class Product(nn.Module):
    def __init__(self, k: int, n: int):
        super().__init__()
        self.b = nn.Parameter(torch.randn(k, n))

    def forward(self, a):
        return a @ self.b


def _product(m: int, k: int, n: int):
    captured = _captured(Product(k, n), torch.randn(m, k))
    (node,) = [x for x in captured.graph.nodes if str(x.target) in ("aten.mm.default", "aten.matmul.default")]
    return captured, node


@pytest.mark.parametrize("n", [2, 3, 16])
def test_a_product_of_few_columns_is_priced_at_the_thin_product_rate(n):
    m, k = 1 << 16, 512
    captured, node = _product(m, k, n)
    assert is_thin_product(node)
    moved = 4 * (m * k + k * n + m * n)
    assert eager_cost(captured).seconds == pytest.approx(moved / THIN_PRODUCT_BANDWIDTH + LAUNCH_S)
    assert THIN_PRODUCT_BANDWIDTH < BANDWIDTH


@pytest.mark.parametrize("n", [1, 17, 64])
def test_a_matrix_vector_product_and_a_wider_product_keep_the_copy_rate(n):
    m, k = 1 << 16, 512
    captured, node = _product(m, k, n)
    assert not is_thin_product(node)
    moved = 4 * (m * k + k * n + m * n)
    assert eager_cost(captured).seconds <= max(moved / BANDWIDTH, 2.0 * m * n * k / 51.3e12) + LAUNCH_S + 1e-12
