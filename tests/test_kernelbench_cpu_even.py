"""Half of the development set (the even places in sorted order) through the CPU-side stages: the default
plan is kept and matches the model in float64; its kernels compile for Hopper."""

import pytest
from kernelbench_cases import (
    assert_the_default_plan_is_kept_and_matches_the_model_in_float64,
    assert_the_generated_kernels_compile_for_hopper,
    half,
    optimized,
)

CASES = half(0)


@pytest.fixture(scope="module", params=CASES, ids=[p.stem for p in CASES])
def run(request, tmp_path_factory):
    return optimized(request.param, tmp_path_factory.mktemp(request.param.stem))


def test_each_problem_keeps_the_default_plan_and_matches_the_model_in_float64(run):
    assert_the_default_plan_is_kept_and_matches_the_model_in_float64(run)


def test_each_problems_kernels_compile_for_hopper(run, tmp_path):
    assert_the_generated_kernels_compile_for_hopper(run, tmp_path)
