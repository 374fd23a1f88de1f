"""The row kernels' sum (sum and mean rows): compensated, so a long near-constant row sums to within a few ulps.

`fuseforge check` found a plain per-thread running sum too coarse: on model 67's spatial mean (64516 values a row)
with inputs scaled by 2^-20, each row is nearly constant and the mean's error was 8x eager's. The statistics struct
is compiled for the host from the generated kernel source and run over a whole row in one running sum (harder
than a GPU thread's share of 126 values), against the float64 sum.
"""

import numpy as np
import pytest
import torch
from compile_check import NVCC, row_program
from test_partition import _captured
from torch import nn

from fuseforge.codegen import generate
from fuseforge.families import named
from fuseforge.partition import partition

MAIN = r"""
    FFRowSum one, merged;
    one_and_four_parts(v, one, merged, 0);
    std::printf("%.9g %.9g\n", one.sum, merged.sum);
    return 0;
}
"""


@pytest.fixture(scope="module")
def summer(tmp_path_factory):
    if NVCC is None:
        pytest.skip("nvcc is not installed")

    class Mean(nn.Module):
        def forward(self, x):
            return x.mean(dim=-1)

    captured = _captured(Mean(), torch.randn(2, 8))
    ext = generate(partition(captured.graph, named("rows")), captured.graph, "mean.py")
    run = row_program(ext.cuda, MAIN, tmp_path_factory.mktemp("row_sum"), "sum")
    return lambda values: tuple(run(values))


def test_a_long_near_constant_row_sums_to_within_a_few_ulps_where_a_plain_running_sum_drifts(summer):
    rng = np.random.default_rng(0)
    row = (0.3 + 1e-7 * rng.standard_normal(64516)).astype(np.float32)  # model 67's row length, inputs x 2^-20
    truth = row.astype(np.float64).sum()
    plain = np.float32(0.0)
    for v in row:  # what the kernel did before: one fp32 running sum
        plain = np.float32(plain + v)
    assert abs(float(plain) - truth) / truth > 5e-6  # the data is hard: a plain running sum misses by ~80 ulps
    for got in summer(row):
        assert abs(got - truth) / truth < 2.5e-7  # within ~2 ulps of the sum


def test_a_signed_row_with_cancellation_sums_to_within_a_few_ulps_of_its_magnitude(summer):
    rng = np.random.default_rng(1)
    row = rng.standard_normal(100003).astype(np.float32) * 3.0 + 0.01
    truth = row.astype(np.float64).sum()
    scale = np.abs(row.astype(np.float64)).sum()
    for got in summer(row):
        assert abs(got - truth) <= 4e-7 * scale


def test_infinities_and_nan_sum_as_in_a_plain_sum(summer):
    assert summer(np.array([1.0, np.inf, 2.0])) == (np.inf, np.inf)
    assert all(np.isnan(summer(np.array([np.inf, 1.0, -np.inf, 5.0]))))
    assert all(np.isnan(summer(np.array([1.0, np.nan, 2.0, 3.0]))))
    assert summer(np.array([-np.inf, -1.0, 3.0, 4.0])) == (-np.inf, -np.inf)
