"""The correctness rule: is a candidate's tensor as close to fp64 truth as eager fp32 is?

For one tensor (an output, or a buffer after the forward), with `truth` computed in float64 and `eager`
by the reference in fp32 on the same inputs:

    err(x)   = RMSE(x - truth), computed in float64 over the regular positions (below)
    ref_err  = err(eager)
    scale    = the RMS of the values the tensor was computed from (scales.py; RMS(truth) when not known)
    floor    = FLOOR_REL * max(RMS(truth), scale) + FLOOR_ABS     (1e-7 * max(...) + 1e-12)
    passes  <=> shape and dtype equal eager's, no NaN where truth is finite,
                the non-regular positions agree (below), and err(cand) <= factor * ref_err + floor

This is the rule of `torch._dynamo.utils.same(fp64_ref=...)` with factor 2 by default, with the floor
measured against the values an output was computed from rather than against the output alone.

Why a floor: when eager happens to be exact or nearly so (an output that is all zeros, a copy, a sum of
exactly representable values), ref_err is 0 and any correct kernel that rounds in a different order would
fail. The floor allows an RMS error of 1e-7 of the scale -- about one fp32 rounding (unit roundoff 6e-8)
-- and 1e-12 absolute for outputs whose truth and operands are all zeros.

Why the scale of the operands: an output that is ~0 by cancellation (the mean of a normalised tensor,
`(x - x.mean()).sum()`, a difference of equal terms) has RMS(truth) ~ 0, but eager's and a correct
kernel's rounding errors are ~1e-7 of the values it was computed from; a floor of 1e-7 * RMS(truth)
would let eager's lucky rounding fail a correct kernel that rounds in another order. The verifier records
the scale during the float64 reference run (`scales.ScaleTracker`): it is carried through ops whose
result has their operands' units (sums, differences, means, views, pools, clamps, activations through zero
with slope about 1) and through products by their factors, never through contractions, norms or
exponentials, so scale >= RMS(truth) and it exceeds RMS(truth) only where an output is smaller than the
values it came from (cancellation, averages of mixed signs, saturation). The floor stays far below any
real bug: a dropped term or a wrong constant moves such an output by a fraction of the operands' scale
(1e-2 of it is 1e5 times the floor). `scale=None` (callers that do not track it) gives the floor
1e-7 * RMS(truth) + 1e-12; a scale that is not finite is ignored.

Regular positions are those where both truth and eager are finite. Elsewhere (truth or eager is inf or
NaN: an overflow, a log of a negative) the candidate must equal eager or truth rounded to its dtype, NaN
matching NaN. A NaN where truth is finite never passes, whatever eager did.

Few carriers: where one or two elements carry eager's whole error (a reciprocal of values near zero, an output of a
handful of elements), the ratio of two honest fp32 computations' errors on one draw is a ratio of one or two random
roundings: on such an output an exact-fp32 kernel with another summation order than cuDNN's was above 2x eager's
error on 12 of 60 draws, 1.03x in the median (bench/results/2026-11-28g_gpu). The same holds where the candidate's
error sits on a few elements while eager's is spread: an output computed from such a value (a layer norm of the
logsumexp of that reciprocal) inherits its one or two roundings on the candidate's side, and eager's own rounding
of the later ops spreads its error thinly (fuzz 79004: 26 carriers of eager's error, 1.5 of the candidate's). Each
check records how many elements carry each error, the participation ratio carriers = (sum e^2)^2 / sum e^4 of the
errors e (n for errors of one size on n elements, 1 for one element), eager's and the candidate's; `few_carriers`
tells a check that failed the bound alone with fewer than CARRIERS_MIN carriers on either side (eager's error must
be nonzero: against an exact eager one draw decides). Such a case is judged again over REDRAWS more draws of its
kind (the verifier and `check` alike): it passes where most draws pass, and none of them is beyond FAR_BEYOND x its
bound (a wrong value, not a rounding). A candidate off on every draw fails them all, whatever its carriers.

Non-floating tensors (integer buffers such as `num_batches_tracked`, integer outputs) must equal eager's
exactly. Alongside the verdict we record relative errors (err / RMS(truth)), the largest absolute error and
its index, and the KernelBench column `torch.allclose(cand, eager, atol=1e-4, rtol=1e-4)`: recorded for
comparison, never the verdict (a more accurate kernel can fail it).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

FACTOR = 2.0
FLOOR_REL = 1e-7
FLOOR_ABS = 1e-12
ALLCLOSE_TOL = 1e-4
CHUNK = 1 << 22  # elements compared at a time: a 2 GB output is read in 32 MB float64 pieces, never copied whole
CARRIERS_MIN = 16.0  # fewer elements than this carrying eager's error: a failure of the bound is judged over draws
REDRAWS = 8  # the draws added to such a case (nine in all: a majority of five decides)
FAR_BEYOND = 1000.0  # a draw this many times past its bound is a wrong value whatever the other draws say
REDRAW_BUDGET_S = 30.0  # seconds of redraws: the verifier's for one case (no draw starts past it), `check`'s
#                          reference's for all its few-carrier cases together

# Taken at import time, before any candidate can replace them.
_allclose = torch.allclose
_isfinite = torch.isfinite
_isnan = torch.isnan


@dataclass
class TensorCheck:
    """The verdict on one tensor, and the numbers behind it (JSON-ready through `to_json`)."""

    name: str
    shape: list[int]
    dtype: str
    passed: bool = False
    reason: str | None = None
    exact: bool = False  # compared for exact equality (non-floating tensors)
    cand_err: float | None = None
    ref_err: float | None = None
    factor: float | None = None
    floor: float | None = None
    bound: float | None = None
    truth_rms: float | None = None
    operand_scale: float | None = None  # the scale of the values it was computed from (None: not tracked)
    cand_rel_err: float | None = None
    ref_rel_err: float | None = None
    max_abs_err: float | None = None
    max_abs_index: list[int] | None = None
    cand_at_max: float | None = None
    truth_at_max: float | None = None
    nan_where_truth_finite: int = 0
    non_regular: int = 0  # positions where truth or eager is not finite
    allclose: bool | None = None
    ref_carriers: float | None = None  # how many elements carry eager's error (module docstring); None: no error
    cand_carriers: float | None = None  # how many carry the candidate's error; None: no error

    def to_json(self) -> dict:
        return {k: _json_number(v) for k, v in asdict(self).items()}


def _json_number(value):
    """Non-finite floats become strings ('nan', 'inf') so that the JSON stays standard."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def rms(x: torch.Tensor) -> float:
    """Root mean square in float64; 0 for an empty tensor."""
    if x.numel() == 0:
        return 0.0
    return x.double().square().mean().sqrt().item()


def rms_difference(x: torch.Tensor, y: torch.Tensor, chunk: int = CHUNK) -> float | None:
    """RMS of x - y in float64 over the positions where x is not NaN, `chunk` elements at a time; None where the
    NaN patterns of x and y differ. x and y: floating tensors of one shape."""
    xs, ys = x.reshape(-1), y.reshape(-1)
    buf = torch.empty(min(chunk, xs.numel()), dtype=torch.float64, device=x.device)
    total, count = 0.0, 0
    for start in range(0, xs.numel(), chunk):
        xc, yc = xs[start:start + chunk], ys[start:start + chunk]
        diff = buf[:xc.numel()].copy_(xc)
        diff.sub_(yc.to(diff.device))
        square = torch.dot(diff, diff).item()
        if not math.isfinite(square):  # a NaN or an inf somewhere in the piece: the NaN patterns, then the rest
            nan_x = _isnan(xc)
            if not torch.equal(nan_x, _isnan(yc).to(nan_x.device)):
                return None
            square = diff[~nan_x].square().sum().item()
            count -= int(nan_x.sum().item())
        total += square
        count += xc.numel()
    return math.sqrt(total / count) if count else 0.0


def _same_or_both_nan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a == b) | (_isnan(a) & _isnan(b))


def _shape_dtype_reason(cand: torch.Tensor, eager: torch.Tensor) -> str | None:
    if tuple(cand.shape) != tuple(eager.shape):
        return f"shape {tuple(cand.shape)} != eager's {tuple(eager.shape)}"
    if cand.dtype != eager.dtype:
        return f"dtype {cand.dtype} != eager's {eager.dtype}"
    return None


def _check_exact(check: TensorCheck, cand: torch.Tensor, eager: torch.Tensor) -> TensorCheck:
    check.exact = True
    equal = cand.to(eager.device) == eager
    check.passed = bool(equal.all().item())
    if not check.passed:
        check.reason = f"{check.name}: {int((~equal).sum().item())} element(s) differ from eager (exact compare)"
    return check


def floor_for(truth_rms: float, scale: float | None = None) -> float:
    """FLOOR_REL * max(RMS(truth), scale) + FLOOR_ABS; a missing or non-finite scale counts as none."""
    if scale is None or not math.isfinite(scale):
        scale = 0.0
    return FLOOR_REL * max(truth_rms, scale) + FLOOR_ABS


class _Scratch:
    """The buffers of `_Sums.add_finite`, one set per compared tensor."""

    def __init__(self, chunk: int, dtype: torch.dtype, device: torch.device):
        self.diff = torch.empty(chunk, dtype=torch.float64, device=device)
        self.ref_diff = torch.empty_like(self.diff)
        self.ref_square = torch.empty_like(self.diff)
        self.error = torch.empty(chunk, dtype=dtype, device=device)
        self.allowed = torch.empty_like(self.error)
        self.within = torch.empty(chunk, dtype=torch.bool, device=device)


@dataclass
class _Sums:
    """What `compare` needs of a floating tensor, summed over its pieces (CHUNK elements each)."""

    regular: int = 0
    truth_sq: float = 0.0
    cand_sq: float = 0.0
    ref_sq: float = 0.0
    ref_quad: float = 0.0  # the sum of eager's errors to the fourth power
    cand_quad: float = 0.0  # the candidate's
    nan_where_truth_finite: int = 0
    non_regular: int = 0
    special_bad: int = 0  # non-regular positions where the candidate equals neither eager nor truth
    allclose: bool = True
    max_abs: tuple | None = None  # (|cand - truth|, flat index, cand, truth) at the first largest, NaN largest

    def add_finite(self, cand: torch.Tensor, eager: torch.Tensor, truth: torch.Tensor, offset: int,
                   scratch: _Scratch) -> bool:
        """One piece, in preallocated buffers (a fresh 32 MB tensor costs more in page faults than the arithmetic):
        False, with nothing added, unless truth, eager and the candidate are all finite (their squared
        errors' sums are), which leaves no NaN and no non-regular position to count."""
        n = cand.numel()
        diff, ref_diff = scratch.diff[:n], scratch.ref_diff[:n]
        truth = truth if truth.dtype == torch.float64 else truth.double()
        torch.sub(cand, truth, out=diff)
        torch.sub(eager, truth, out=ref_diff)
        squares = [torch.dot(x, x).item() for x in (truth, diff, ref_diff)]
        if not all(math.isfinite(v) for v in squares):
            return False
        ref_square = torch.mul(ref_diff, ref_diff, out=scratch.ref_square[:n])
        self.regular += n
        self.truth_sq += squares[0]
        self.cand_sq += squares[1]
        self.ref_sq += squares[2]
        self.ref_quad += torch.dot(ref_square, ref_square).item()
        cand_square = torch.mul(diff, diff, out=ref_square)  # the buffer is free again
        self.cand_quad += torch.dot(cand_square, cand_square).item()
        high, low = int(torch.argmax(diff).item()), int(torch.argmin(diff).item())
        flat = min(high, low) if diff[high].item() == -diff[low].item() else \
            (high if diff[high].item() > -diff[low].item() else low)
        value = abs(diff[flat].item())
        if self.max_abs is None or value > self.max_abs[0]:
            self.max_abs = (value, offset + flat, cand[flat].item(), truth[flat].item())
        if self.allclose:  # torch.isclose's arithmetic, in cand's dtype: |cand - eager| <= atol + |rtol * eager|
            error, allowed = scratch.error[:n], scratch.allowed[:n]
            torch.sub(cand, eager, out=error).abs_()
            torch.mul(eager, ALLCLOSE_TOL, out=allowed).abs_().add_(ALLCLOSE_TOL)
            self.allclose = bool(torch.le(error, allowed, out=scratch.within[:n]).all().item())
        return True

    def add(self, cand: torch.Tensor, eager: torch.Tensor, truth: torch.Tensor, offset: int) -> None:
        """One piece, any values (inf and NaN included)."""
        truth = truth.double()
        c64 = cand.double()
        truth_finite = _isfinite(truth)
        regular = truth_finite & _isfinite(eager)
        self.nan_where_truth_finite += int((_isnan(cand) & truth_finite).sum().item())
        non_regular = int((~regular).sum().item())
        self.non_regular += non_regular

        def on_regular(x: torch.Tensor) -> torch.Tensor:
            return x[regular] if non_regular else x
        self.regular += cand.numel() - non_regular
        diff = c64 - truth
        self.truth_sq += on_regular(truth).square().sum().item()
        cand_square = on_regular(diff).square()
        self.cand_sq += cand_square.sum().item()
        self.cand_quad += cand_square.square().sum().item()
        ref_square = on_regular(eager.double() - truth).square()
        self.ref_sq += ref_square.sum().item()
        self.ref_quad += ref_square.square().sum().item()
        absdiff = diff.abs().masked_fill(~regular, 0.0)
        flat = int(torch.argmax(absdiff).item())
        value = absdiff[flat].item()
        if self.max_abs is None or value > self.max_abs[0] or (math.isnan(value) and not math.isnan(self.max_abs[0])):
            self.max_abs = (value, offset + flat, c64[flat].item(), truth[flat].item())
        self.allclose = self.allclose and bool(_allclose(cand, eager, atol=ALLCLOSE_TOL, rtol=ALLCLOSE_TOL))
        if non_regular:
            agree = _same_or_both_nan(cand, eager) | _same_or_both_nan(cand, truth.to(cand.dtype))
            self.special_bad += int((~regular & ~agree).sum().item())

    def rms(self, total: float) -> float:
        return math.sqrt(total / self.regular) if self.regular else 0.0


def compare(name: str, cand: torch.Tensor, eager: torch.Tensor, truth: torch.Tensor,
            factor: float = FACTOR, scale: float | None = None, chunk: int = CHUNK) -> TensorCheck:
    """Apply the rule of the module docstring to one tensor; `truth` is eager's fp64 counterpart and
    `scale` the RMS of the values it was computed from (scales.ScaleTracker), if known. Large tensors are
    compared `chunk` elements at a time (the sums of squares added up in float64)."""
    check = TensorCheck(name, list(eager.shape), str(eager.dtype).removeprefix("torch."))
    mismatch = _shape_dtype_reason(cand, eager)
    if mismatch:
        check.reason = f"{name}: {mismatch}"
        return check
    if not eager.is_floating_point():
        return _check_exact(check, cand, eager)
    sums = _Sums()
    flat = [x.reshape(-1) for x in (cand, eager, truth)]
    scratch = _Scratch(min(chunk, eager.numel()), eager.dtype, truth.device) if eager.numel() else None
    for start in range(0, eager.numel(), chunk):
        c, e, t = (x[start:start + chunk].to(truth.device) for x in flat)
        if not sums.add_finite(c, e, t, start, scratch):
            sums.add(c, e, t, start)

    check.nan_where_truth_finite = sums.nan_where_truth_finite
    check.non_regular = sums.non_regular
    check.truth_rms = sums.rms(sums.truth_sq)
    check.cand_err = sums.rms(sums.cand_sq)
    check.ref_err = sums.rms(sums.ref_sq)
    check.operand_scale = scale if scale is not None and math.isfinite(scale) else None
    check.floor = floor_for(check.truth_rms, check.operand_scale)
    check.factor = factor
    check.bound = factor * check.ref_err + check.floor
    if sums.ref_quad > 0 and math.isfinite(sums.ref_quad):
        check.ref_carriers = sums.ref_sq ** 2 / sums.ref_quad
    if sums.cand_quad > 0 and math.isfinite(sums.cand_quad):
        check.cand_carriers = sums.cand_sq ** 2 / sums.cand_quad
    if check.truth_rms > 0:
        check.cand_rel_err = check.cand_err / check.truth_rms
        check.ref_rel_err = check.ref_err / check.truth_rms
    if sums.max_abs is not None:
        check.max_abs_err, flat_index, check.cand_at_max, check.truth_at_max = sums.max_abs
        check.max_abs_index = [int(i) for i in torch.unravel_index(torch.tensor(flat_index), truth.shape)]
    check.allclose = sums.allclose

    check.reason = _float_reason(check, sums.special_bad)
    check.passed = check.reason is None
    return check


def _float_reason(check: TensorCheck, special_bad: int) -> str | None:
    """The first way the floating tensor fails the rule, in one line; None if it passes."""
    if check.nan_where_truth_finite:
        return f"{check.name}: {check.nan_where_truth_finite} NaN where the fp64 truth is finite"
    if special_bad:
        return f"{check.name}: {special_bad} element(s) where truth or eager is inf/NaN differ from both"
    if not check.cand_err <= check.bound:  # also catches a NaN error
        rel = "" if check.cand_rel_err is None else f" (rel. {check.cand_rel_err:.2e})"
        return (f"{check.name}: error vs fp64 {check.cand_err:.3e}{rel} > bound {check.bound:.3e} "
                f"({check.factor:g} x eager's {check.ref_err:.3e} + floor {check.floor:.1e})")
    return None


def carriers(eager: torch.Tensor, truth: torch.Tensor) -> float | None:
    """How many elements carry eager's error vs `truth` (module docstring), over the positions where both are
    finite; None for a non-floating tensor or no error."""
    if not eager.is_floating_point() or eager.numel() == 0:
        return None
    diff = eager.double().reshape(-1) - truth.double().reshape(-1).to(eager.device)
    square = diff[_isfinite(diff)].square()
    quad = square.square().sum().item()
    return square.sum().item() ** 2 / quad if quad > 0 and math.isfinite(quad) else None


def _bound_alone(check: TensorCheck) -> bool:
    """Failed on the bound alone: no NaN where the truth is finite, non-finite positions agreeing, a floating tensor."""
    return not check.passed and not check.exact and check.reason is not None and " > bound " in check.reason


def fewest_carriers(check: TensorCheck) -> float | None:
    """The fewer of eager's and the candidate's carriers; None where eager has no error (module docstring)."""
    if check.ref_carriers is None:
        return None
    return min(check.ref_carriers, math.inf if check.cand_carriers is None else check.cand_carriers)


def few_carriers(check: TensorCheck) -> bool:
    """A floating check that failed on the bound alone with eager's or the candidate's error on fewer than
    CARRIERS_MIN elements: one draw does not decide it (module docstring)."""
    fewest = fewest_carriers(check)
    return _bound_alone(check) and fewest is not None and fewest < CARRIERS_MIN


def majority_of_draws(draws: list[list[TensorCheck]]) -> tuple[bool, str]:
    """The verdict on a case judged over draws, each given as the list of its checks that failed (the first draw's
    all `few_carriers`): passed when more than half of the draws pass, none failing otherwise than on the bound or
    FAR_BEYOND x past it; with a one-line account either way."""
    failed = [fails for fails in draws if fails]
    fewest = min((n for n in map(fewest_carriers, draws[0]) if n is not None), default=float("nan"))
    account = (f"{len(draws) - len(failed)} of {len(draws)} draws within the bound (an error carried by "
               f"{fewest:.1f} element(s) on the first)")
    wrong = [c for fails in failed for c in fails if not _bound_alone(c) or not c.cand_err <= FAR_BEYOND * c.bound]
    if wrong:
        return False, f"{account}; a draw failed otherwise: {wrong[0].reason}"
    return 2 * (len(draws) - len(failed)) > len(draws), account
