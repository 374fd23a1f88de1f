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


def _record_max_error(check: TensorCheck, c64: torch.Tensor, truth: torch.Tensor, regular: torch.Tensor):
    absdiff = (c64 - truth).abs().masked_fill(~regular, 0.0)
    flat = int(torch.argmax(absdiff).item())
    index = [int(i) for i in torch.unravel_index(torch.tensor(flat), truth.shape)]
    check.max_abs_err = absdiff.reshape(-1)[flat].item()
    check.max_abs_index = index
    check.cand_at_max = c64.reshape(-1)[flat].item()
    check.truth_at_max = truth.reshape(-1)[flat].item()


def floor_for(truth_rms: float, scale: float | None = None) -> float:
    """FLOOR_REL * max(RMS(truth), scale) + FLOOR_ABS; a missing or non-finite scale counts as none."""
    if scale is None or not math.isfinite(scale):
        scale = 0.0
    return FLOOR_REL * max(truth_rms, scale) + FLOOR_ABS


def compare(name: str, cand: torch.Tensor, eager: torch.Tensor, truth: torch.Tensor,
            factor: float = FACTOR, scale: float | None = None) -> TensorCheck:
    """Apply the rule of the module docstring to one tensor; `truth` is eager's fp64 counterpart and
    `scale` the RMS of the values it was computed from (scales.ScaleTracker), if known."""
    check = TensorCheck(name, list(eager.shape), str(eager.dtype).removeprefix("torch."))
    mismatch = _shape_dtype_reason(cand, eager)
    if mismatch:
        check.reason = f"{name}: {mismatch}"
        return check
    if not eager.is_floating_point():
        return _check_exact(check, cand, eager)
    cand = cand.to(truth.device)
    eager = eager.to(truth.device)
    truth = truth.double()
    c64, e64 = cand.double(), eager.double()
    truth_finite = _isfinite(truth)
    regular = truth_finite & _isfinite(eager)

    check.nan_where_truth_finite = int((_isnan(cand) & truth_finite).sum().item())
    check.non_regular = int((~regular).sum().item())

    def on_regular(x: torch.Tensor) -> torch.Tensor:
        return x[regular] if check.non_regular else x

    check.truth_rms = rms(on_regular(truth))
    check.cand_err = rms(on_regular(c64 - truth))
    check.ref_err = rms(on_regular(e64 - truth))
    check.operand_scale = scale if scale is not None and math.isfinite(scale) else None
    check.floor = floor_for(check.truth_rms, check.operand_scale)
    check.factor = factor
    check.bound = factor * check.ref_err + check.floor
    if check.truth_rms > 0:
        check.cand_rel_err = check.cand_err / check.truth_rms
        check.ref_rel_err = check.ref_err / check.truth_rms
    if cand.numel():
        _record_max_error(check, c64, truth, regular)
    check.allclose = bool(_allclose(cand, eager, atol=ALLCLOSE_TOL, rtol=ALLCLOSE_TOL))

    check.reason = _float_reason(check, cand, eager, truth, regular)
    check.passed = check.reason is None
    return check


def _float_reason(check: TensorCheck, cand, eager, truth, regular) -> str | None:
    """The first way the floating tensor fails the rule, in one line; None if it passes."""
    if check.nan_where_truth_finite:
        return f"{check.name}: {check.nan_where_truth_finite} NaN where the fp64 truth is finite"
    if check.non_regular:
        special = ~regular
        agree = _same_or_both_nan(cand, eager) | _same_or_both_nan(cand, truth.to(cand.dtype))
        bad = int((special & ~agree).sum().item())
        if bad:
            return f"{check.name}: {bad} element(s) where truth or eager is inf/NaN differ from both"
    if not check.cand_err <= check.bound:  # also catches a NaN error
        rel = "" if check.cand_rel_err is None else f" (rel. {check.cand_rel_err:.2e})"
        return (f"{check.name}: error vs fp64 {check.cand_err:.3e}{rel} > bound {check.bound:.3e} "
                f"({check.factor:g} x eager's {check.ref_err:.3e} + floor {check.floor:.1e})")
    return None
