"""The correctness rule of fuseforge.evaluate.numerics, on hand-made tensors."""

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fuseforge.evaluate.numerics import FLOOR_ABS, FLOOR_REL, compare, rms, rms_difference


def _truth_and_eager(n=1000, noise=1e-6, seed=0):
    """A float64 truth of RMS ~1 and an 'eager' fp32 copy off by `noise` RMS."""
    g = torch.Generator().manual_seed(seed)
    truth = torch.randn(n, dtype=torch.float64, generator=g)
    eager = (truth + noise * torch.randn(n, dtype=torch.float64, generator=g)).float()
    return truth, eager


def _bound(truth, eager, factor=2.0):
    ref_err = rms(eager.double() - truth)
    return factor * ref_err + FLOOR_REL * rms(truth) + FLOOR_ABS


def _off_by(truth, err):
    """truth + a constant offset of `err`, in fp32 (RMS error ~err)."""
    return (truth + err).float()


def test_a_candidate_equal_to_eager_passes():
    truth, eager = _truth_and_eager()
    check = compare("out", eager.clone(), eager, truth)
    assert check.passed and check.reason is None
    assert check.cand_err == check.ref_err


def test_a_candidate_twice_as_wrong_as_eager_plus_floor_fails():
    truth, eager = _truth_and_eager()
    cand = _off_by(truth, 1.05 * _bound(truth, eager))
    check = compare("out", cand, eager, truth)
    assert not check.passed
    assert check.cand_err > check.bound
    assert "error vs fp64" in check.reason and check.reason.startswith("out:")


def test_a_candidate_just_inside_the_bound_passes():
    truth, eager = _truth_and_eager()
    cand = _off_by(truth, 0.9 * _bound(truth, eager))
    assert compare("out", cand, eager, truth).passed


def test_the_tolerance_factor_widens_the_bound():
    truth, eager = _truth_and_eager()
    cand = _off_by(truth, 3.0 * rms(eager.double() - truth))
    assert not compare("out", cand, eager, truth, factor=2.0).passed
    assert compare("out", cand, eager, truth, factor=4.0).passed


def test_a_nan_where_truth_is_finite_fails_even_if_eager_is_far_off():
    truth, eager = _truth_and_eager(noise=10.0)
    cand = truth.float().clone()
    cand[3] = float("nan")
    check = compare("out", cand, eager, truth)
    assert not check.passed
    assert check.nan_where_truth_finite == 1
    assert "NaN" in check.reason


def test_the_floor_lets_a_near_zero_output_differ_by_a_rounding():
    truth = torch.zeros(100, dtype=torch.float64)
    eager = torch.zeros(100)
    assert compare("out", torch.full((100,), 1e-13), eager, truth).passed
    assert not compare("out", torch.full((100,), 1e-9), eager, truth).passed


def test_the_floor_scales_with_the_output_so_exact_eager_does_not_fail_a_reordered_sum():
    truth = torch.full((100,), 1e6, dtype=torch.float64)
    eager = truth.float()  # exact: ref_err is 0
    one_ulp = torch.nextafter(eager, torch.tensor(math.inf))  # 1 ulp of 1e6 is 0.0625 = 6e-8 relative
    assert compare("out", one_ulp, eager, truth).passed
    assert not compare("out", eager + 1.0, eager, truth).passed


def test_a_more_accurate_candidate_passes_although_allclose_with_eager_fails():
    truth, eager = _truth_and_eager(noise=1e-3)
    check = compare("out", truth.float(), eager, truth)
    assert check.passed
    assert check.allclose is False


def test_allclose_is_recorded_true_for_a_candidate_close_to_eager():
    truth, eager = _truth_and_eager()
    assert compare("out", eager.clone(), eager, truth).allclose is True


def test_a_shape_mismatch_fails_before_any_arithmetic():
    truth, eager = _truth_and_eager()
    check = compare("out", eager.reshape(10, 100), eager, truth)
    assert not check.passed and "shape" in check.reason and check.cand_err is None


def test_a_dtype_mismatch_fails_even_when_values_are_more_accurate():
    truth, eager = _truth_and_eager()
    check = compare("out", truth.clone(), eager, truth)
    assert not check.passed and "dtype" in check.reason


def test_integer_tensors_must_equal_eager_exactly():
    eager = torch.tensor(7)
    truth = torch.tensor(7)
    assert compare("buffer n", torch.tensor(7), eager, truth).passed
    check = compare("buffer n", torch.tensor(6), eager, truth)
    assert not check.passed and check.exact and "differ" in check.reason


def test_inf_and_nan_where_truth_is_not_finite_pass_when_they_match_eager():
    truth, eager = _truth_and_eager(n=10)
    truth[0], truth[1] = math.inf, math.nan
    eager[0], eager[1] = math.inf, math.nan
    cand = eager.clone()
    check = compare("out", cand, eager, truth)
    assert check.passed, check.reason
    assert check.non_regular == 2
    assert math.isfinite(check.cand_err)


def test_a_finite_value_where_truth_and_eager_are_inf_fails():
    truth, eager = _truth_and_eager(n=10)
    truth[0] = eager[0] = math.inf
    cand = eager.clone()
    cand[0] = 0.0
    check = compare("out", cand, eager, truth)
    assert not check.passed and "inf/NaN" in check.reason


def test_the_largest_error_is_located_by_its_index():
    truth = torch.zeros(4, 5, dtype=torch.float64)
    eager = torch.zeros(4, 5)
    cand = torch.zeros(4, 5)
    cand[2, 3] = -0.5
    check = compare("out", cand, eager, truth)
    assert check.max_abs_index == [2, 3]
    assert check.max_abs_err == 0.5 and check.cand_at_max == -0.5 and check.truth_at_max == 0.0


def test_relative_errors_are_errors_over_the_rms_of_truth():
    truth = torch.full((8,), 2.0, dtype=torch.float64)
    eager = torch.full((8,), 2.0) + 0.002
    check = compare("out", eager.clone(), eager, truth)
    assert math.isclose(check.truth_rms, 2.0)
    assert math.isclose(check.ref_rel_err, check.ref_err / 2.0)
    assert math.isclose(check.cand_rel_err, 1e-3, rel_tol=1e-3)


def test_the_json_form_writes_non_finite_numbers_as_strings():
    truth, eager = _truth_and_eager(n=10)
    cand = eager.clone()
    cand[:] = math.inf
    record = compare("out", cand, eager, truth).to_json()
    assert record["cand_err"] == "inf" and record["passed"] is False


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), noise=st.floats(0.0, 1e-2), scale=st.floats(1e-6, 1e6))
def test_truth_rounded_to_fp32_always_passes_because_no_fp32_tensor_is_closer(seed, noise, scale):
    truth, eager = _truth_and_eager(n=64, noise=noise, seed=seed)
    truth, eager = truth * scale, (eager.double() * scale).float()
    assert compare("out", truth.float(), eager, truth).passed


def _with_specials(n=1001, seed=3):
    """A truth with an inf and a NaN, an eager that overflows once more, and a candidate that agrees with eager at
    two of those places and not at the third, plus its largest error at a known index."""
    truth, eager = _truth_and_eager(n, seed=seed)
    truth[10], truth[500] = float("inf"), float("nan")
    eager = eager.clone()
    eager[10], eager[500], eager[900] = float("inf"), float("nan"), float("inf")
    cand = eager.clone()
    cand[900] = 1.0
    cand[123] += 0.5
    return cand, eager, truth


def test_a_tensor_compared_in_pieces_gets_the_verdict_and_numbers_of_one_piece():
    for cand, eager, truth in (_with_specials(), _with_specials(seed=4)):
        whole = compare("out", cand, eager, truth)
        for chunk in (1, 7, 100, 1000):
            pieces = compare("out", cand, eager, truth, chunk=chunk)
            assert (pieces.passed, pieces.reason, pieces.non_regular, pieces.nan_where_truth_finite) == \
                (whole.passed, whole.reason, whole.non_regular, whole.nan_where_truth_finite)
            assert pieces.max_abs_index == whole.max_abs_index == [123]
            assert (pieces.cand_at_max, pieces.truth_at_max, pieces.allclose) == \
                (whole.cand_at_max, whole.truth_at_max, whole.allclose)
            for field in ("truth_rms", "cand_err", "ref_err", "bound"):
                assert math.isclose(getattr(pieces, field), getattr(whole, field), rel_tol=1e-12), field
    assert "1 element(s) where truth or eager is inf/NaN differ from both" in whole.reason


def test_a_nan_in_a_later_piece_is_the_largest_error_and_fails():
    truth, eager = _truth_and_eager(50)
    cand = eager.clone()
    cand[3] += 0.25
    cand[41] = float("nan")
    for chunk in (1, 8, 64):
        check = compare("out", cand, eager, truth, chunk=chunk)
        assert check.max_abs_index == [41] and math.isnan(check.max_abs_err)
        assert not check.passed and "1 NaN where the fp64 truth is finite" in check.reason


def test_a_two_dimensional_tensor_names_its_worst_element_by_row_and_column():
    truth, eager = _truth_and_eager(60)
    cand = eager.clone()
    cand[37] -= 0.1
    check = compare("out", cand.reshape(6, 10), eager.reshape(6, 10), truth.reshape(6, 10), chunk=16)
    assert check.max_abs_index == [3, 7]


def test_finite_tensors_in_pieces_match_the_rule_computed_directly():
    truth, eager = _truth_and_eager(300, seed=5)
    cand = (truth + 1e-6 * torch.sin(torch.arange(300, dtype=torch.float64))).float()
    cand[250] = truth[250] - 0.125  # the largest error, below the truth
    for chunk in (1, 13, 300):
        check = compare("out", cand, eager, truth, chunk=chunk)
        assert math.isclose(check.cand_err, rms(cand.double() - truth), rel_tol=1e-12)
        assert math.isclose(check.ref_err, rms(eager.double() - truth), rel_tol=1e-12)
        assert math.isclose(check.truth_rms, rms(truth), rel_tol=1e-12)
        assert check.max_abs_index == [250] and check.cand_at_max == cand[250].item()
        assert check.allclose is torch.allclose(cand, eager, atol=1e-4, rtol=1e-4) is False
        assert not check.passed
    close = compare("out", eager + 1e-5, eager, truth, chunk=7)
    assert close.allclose is torch.allclose(eager + 1e-5, eager, atol=1e-4, rtol=1e-4) is True


def test_errors_of_equal_size_above_and_below_the_truth_name_the_first():
    truth = torch.zeros(10, dtype=torch.float64)
    cand = torch.zeros(10)
    cand[2], cand[5] = -0.5, 0.5
    assert compare("out", cand, torch.zeros(10), truth).max_abs_index == [2]
    cand[2], cand[5] = 0.5, -0.5
    assert compare("out", cand, torch.zeros(10), truth).max_abs_index == [2]


def test_the_rms_difference_skips_shared_nans_in_any_piece_and_refuses_different_nan_patterns():
    x = torch.linspace(-1, 1, 40)
    y = x + 1e-3
    x[17] = y[17] = float("nan")
    direct = rms(x.double()[~x.isnan()] - y.double()[~x.isnan()])
    for chunk in (1, 6, 40):
        assert math.isclose(rms_difference(x, y, chunk=chunk), direct, rel_tol=1e-12)
    y[30] = float("nan")
    assert all(rms_difference(x, y, chunk=chunk) is None for chunk in (1, 6, 40))
    assert math.isnan(rms_difference(torch.full((4,), float("inf")), torch.full((4,), float("inf")), chunk=2))
