"""The row kernels' Welford statistics (layer_norm, var, std): taken of the values less a pivot, so a row whose values
lie far from zero next to their spread keeps its mean and variance to a few ulps of the spread.

`fuseforge check` found the plain Welford update too coarse: a layer norm of exp(conv(x)) at inputs scaled by 2^-20
(every value of a row near exp(bias)) had 2.2x eager's error. The statistics struct is compiled for the host from the
generated kernel source and run over a whole row in one running update and in four parts merged (as threads merge
theirs), against float64.
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
    FFRowWelford one, merged;
    one_and_four_parts(v, one, merged, (int)n);
    std::printf("%.9g %.9g %.9g %.9g %.9g %.9g\n", one.mean, one.lo, one.m2, merged.mean, merged.lo, merged.m2);
    return 0;
}
"""


@pytest.fixture(scope="module")
def welford(tmp_path_factory):
    if NVCC is None:
        pytest.skip("nvcc is not installed")

    class Norm(nn.Module):
        def forward(self, x):
            return nn.functional.layer_norm(x, (8,))

    captured = _captured(Norm(), torch.randn(2, 8))
    ext = generate(partition(captured.graph, named("rows")), captured.graph, "norm.py")
    run = row_program(ext.cuda, MAIN, tmp_path_factory.mktemp("row_welford"), "welford")

    def stats(values: np.ndarray) -> list[tuple[float, float]]:
        """(mean as hi + lo in float64, M2) of one running update and of four merged parts."""
        got = run(values)
        return [(got[0] + got[1], got[2]), (got[3] + got[4], got[5])]
    return stats


def _truth(row: np.ndarray) -> tuple[float, float, float]:
    r = row.astype(np.float64)
    mean = r.mean()
    return mean, ((r - mean) ** 2).sum(), r.std()


@pytest.mark.parametrize("centre", [3.0, -250.0, 1e-3])
def test_a_row_far_from_zero_next_to_its_spread_keeps_mean_and_variance_to_a_few_ulps_of_the_spread(welford, centre):
    rng = np.random.default_rng(0)
    row = (centre + abs(centre) * 3e-5 * rng.standard_normal(4099)).astype(np.float32)
    mean, m2, std = _truth(row)
    for got_mean, got_m2 in welford(row):
        # 1e-5 of the spread and 1e-6 of M2 here; the plain update (before) missed by 3e-4 to 2e-2 and 1e-4 to 6e-4
        assert abs(got_mean - mean) <= 5e-5 * std
        assert abs(got_m2 - m2) <= 1e-5 * m2


def test_a_spread_signed_row_keeps_mean_and_variance_as_before(welford):
    rng = np.random.default_rng(1)
    row = rng.standard_normal(10007).astype(np.float32) * 2.0 + 0.5
    mean, m2, std = _truth(row)
    for got_mean, got_m2 in welford(row):  # 2e-7 of the spread and 2e-7 of M2 both before and now
        assert abs(got_mean - mean) <= 1e-6 * std
        assert abs(got_m2 - m2) <= 1e-6 * m2


def test_a_non_finite_first_value_gives_the_plain_update_non_finite_statistics(welford):
    for (got_mean, got_m2) in welford(np.array([np.inf, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])):
        assert not np.isfinite(got_mean) or not np.isfinite(got_m2)
    for (_, got_m2) in welford(np.array([1.0, 2.0, np.nan, 3.0])):
        assert np.isnan(got_m2)
