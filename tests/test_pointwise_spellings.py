"""Every spelling in the pointwise table, compiled for the host with nvcc, computes what torch computes.

All cases go into one C++ file (the table's PRELUDE plus one `extern "C"` loop per case), which nvcc
compiles once per session into a shared library: the `FF_HD` helpers are `__host__ __device__`, so no
GPU is needed. Each case's expression comes from `pointwise.spell` on a real fx node, so argument
binding and defaults are exercised too. The reference is the ATen op itself in float64 on the same
float32 inputs (upcast), rounded to float32, the best any float32 kernel can return. A case passes
when its NaNs sit exactly where the reference's do and every other element is within
4 * (torch's own float32 error) + 4e-7, the error being |x - ref| / max(|ref|, 1); an element equal to
torch's float32 result passes regardless (the same value torch returns).
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
from torch import fx

from fuseforge import pointwise

NVCC = shutil.which("nvcc")
pytestmark = pytest.mark.skipif(
    NVCC is None, reason="nvcc is not on PATH: the spellings are compiled for the host with it")

NAN, INF = float("nan"), float("inf")
ULPS_SLACK = 4e-7  # a few float32 ulps, relative to max(|ref|, 1)
TORCH_ERROR_FACTOR = 4.0


# ---------------------------------------------------------------- inputs


def _f32(*parts) -> np.ndarray:
    return np.concatenate([np.asarray(p, dtype=np.float64).ravel() for p in parts]).astype(np.float32)


_rng = np.random.default_rng(20240611)

# NaN, infinities, signed zeros, rounding ties, activation kinks (±3, ±6), softplus thresholds, large values.
SPECIALS = [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 2.4, 2.6, 3.0, -3.0,
            6.0, -6.0, 1e-3, -1e-3, 1e-7, -1e-7, 20.0, -20.0, 30.0, -30.0, 100.0, -100.0, 1e4, -1e4]
GENERAL = _f32(SPECIALS, _rng.normal(0.0, 3.0, 600), _rng.uniform(-12.0, 12.0, 400))
# Every special paired with every special, then random pairs.
PAIR_A = _f32(np.repeat(SPECIALS, len(SPECIALS)), _rng.normal(0.0, 3.0, 500), _rng.uniform(-50, 50, 300))
PAIR_B = _f32(np.tile(SPECIALS, len(SPECIALS)), _rng.normal(0.0, 3.0, 500), _rng.uniform(-50, 50, 300))
N_PAIRS = len(PAIR_A)

POSITIVE_SPECIALS = [NAN, INF, 0.0, 1e-30, 1e-7, 1e-3, 0.25, 0.5, 1.0, 2.0, 4.0, 30.0, 100.0, 1e10, 1e30]
POSITIVE = _f32(POSITIVE_SPECIALS, 10.0 ** _rng.uniform(-6.0, 6.0, 600), _rng.uniform(0.0, 10.0, 400))
# Positive values plus a few outside the domain of log and sqrt (NaN there, -inf or -0 at -0).
DOMAIN = _f32(POSITIVE, [-0.0, -1e-3, -1.0, -100.0, -INF])
EXPONENTS = _f32(np.tile(SPECIALS, len(POSITIVE_SPECIALS)), _rng.uniform(-4.0, 4.0, len(POSITIVE) - 15))
BASES = _f32(np.repeat(POSITIVE_SPECIALS, len(SPECIALS)), POSITIVE[15:])

# Quotients within rounding of an integer: float32 a / b may round up to it (1 / 0.1f = 9.99999985...).
_divisors = _rng.uniform(0.01, 10.0, 300).astype(np.float32) * _rng.choice([-1.0, 1.0], 300)
_multiples = _rng.integers(1, 100, 300) * _rng.choice([-1.0, 1.0], 300)
QUOT_A = _f32(PAIR_A, [1.0, 7.0, -1.0, 3.0], (_divisors.astype(np.float64) * _multiples))
QUOT_B = _f32(PAIR_B, [0.1, 0.7, 0.1, 0.3], _divisors)

# Few distinct values so that comparisons hit equality, NaN and infinities often.
DISCRETE = [NAN, INF, -INF, 0.0, -0.0, 0.5, -0.5, 1.0, 2.0, 30.0]
CMP_A = _f32(np.repeat(DISCRETE, len(DISCRETE)), _rng.choice(DISCRETE, 200))
CMP_B = _f32(np.tile(DISCRETE, len(DISCRETE)), _rng.choice(DISCRETE, 200))

CONDITION = _f32(_rng.integers(0, 2, N_PAIRS))

# For trunc(a / b): values exact in binary, whose quotients never round across an integer in float32,
# which would make torch's own float32 error (trunc(2.4f / 0.001f) = 2400 against 2399), hence the tolerance, huge.
EXACT = [s for s in SPECIALS if s != s or float(np.float32(s)) == s]
TRUNC_A = _f32(np.repeat(EXACT, len(EXACT)), PAIR_A[len(SPECIALS) ** 2:])
TRUNC_B = _f32(np.tile(EXACT, len(EXACT)), PAIR_B[len(SPECIALS) ** 2:])


# ---------------------------------------------------------------- cases


@dataclass(frozen=True)
class In:
    """A tensor operand: `name` is the C++ variable holding its element ("a", "b" or "c")."""

    name: str
    boolean: bool = False


A, B, C = In("a"), In("b"), In("c")
COND = In("c", boolean=True)


@dataclass(eq=False)
class Case:
    key: str  # the TABLE key, also the ATen overload to call
    label: str  # what distinguishes this case from others of the same op ("" for the defaults)
    args: tuple
    kwargs: dict = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)  # operand name -> float32 values

    @property
    def id(self) -> str:
        return f"{self.key}-{self.label}" if self.label else self.key

    @property
    def op(self) -> torch._ops.OpOverload:
        _, name, overload = self.key.split(".")
        return getattr(getattr(torch.ops.aten, name), overload)

    @property
    def operands(self) -> list[In]:
        return [v for v in (*self.args, *self.kwargs.values()) if isinstance(v, In)]

    @property
    def size(self) -> int:
        return len(next(iter(self.inputs.values())))


def unary(key: str, label: str = "", *scalars, values: np.ndarray = GENERAL, **kwargs) -> Case:
    return Case(key, label, (A, *scalars), kwargs, {"a": values})


def binary(key: str, label: str = "", *scalars, a=PAIR_A, b=PAIR_B, **kwargs) -> Case:
    return Case(key, label, (A, B, *scalars), kwargs, {"a": a, "b": b})


def with_scalar(key: str, label: str, other, values: np.ndarray = GENERAL, **kwargs) -> Case:
    return Case(key, label, (A, other), kwargs, {"a": values})


def _cases() -> list[Case]:
    cases = [
        # arithmetic
        binary("aten.add.Tensor"),
        binary("aten.add.Tensor", "alpha=2", alpha=2),
        with_scalar("aten.add.Tensor", "scalar-other", 1.5),
        with_scalar("aten.add.Scalar", "", 1.5),
        with_scalar("aten.add.Scalar", "alpha=2", -0.75, alpha=2),
        binary("aten.sub.Tensor"),
        binary("aten.sub.Tensor", "alpha=2", alpha=2),
        with_scalar("aten.sub.Scalar", "", 2.5),
        with_scalar("aten.sub.Scalar", "alpha=2", 3, alpha=2),
        binary("aten.rsub.Tensor"),
        binary("aten.rsub.Tensor", "alpha=2", alpha=2),
        with_scalar("aten.rsub.Scalar", "", 1.0),
        with_scalar("aten.rsub.Scalar", "alpha=2", -4.5, alpha=2),
        binary("aten.mul.Tensor"),
        with_scalar("aten.mul.Tensor", "scalar-other", 0.1),
        with_scalar("aten.mul.Scalar", "", -2.5),
        binary("aten.div.Tensor", a=QUOT_A, b=QUOT_B),
        with_scalar("aten.div.Scalar", "", 0.1),
        binary("aten.div.Tensor_mode", "None", a=QUOT_A, b=QUOT_B, rounding_mode=None),
        # trunc(a / b) is what torch computes in float32 too, so no QUOT_* here; floor must get those right.
        binary("aten.div.Tensor_mode", "trunc", a=TRUNC_A, b=TRUNC_B, rounding_mode="trunc"),
        binary("aten.div.Tensor_mode", "floor", a=QUOT_A, b=QUOT_B, rounding_mode="floor"),
        unary("aten.neg.default"),
        unary("aten.reciprocal.default"),
        unary("aten.square.default"),
        binary("aten.pow.Tensor_Tensor", a=BASES, b=EXPONENTS),
        Case("aten.pow.Scalar", "base=2", (2.0, A), {}, {"a": GENERAL}),
        Case("aten.pow.Scalar", "base=0.3", (0.3, A), {}, {"a": GENERAL}),
        binary("aten.minimum.default"),
        binary("aten.maximum.default"),
        binary("aten.min.other"),
        binary("aten.max.other"),
        Case("aten.where.self", "", (COND, A, B), {}, {"a": PAIR_A, "b": PAIR_B, "c": CONDITION}),
        Case("aten.where.ScalarSelf", "", (COND, 0.0, B), {}, {"b": PAIR_B, "c": CONDITION}),
        Case("aten.where.ScalarOther", "", (COND, A, -1.5), {}, {"a": PAIR_A, "c": CONDITION}),
        Case("aten.masked_fill.Scalar", "", (A, COND, 0.25), {}, {"a": PAIR_A, "c": CONDITION}),
        unary("aten.clone.default"),
        # elementary functions
        unary("aten.exp.default"),
        unary("aten.exp2.default"),
        unary("aten.expm1.default"),
        unary("aten.log.default", values=DOMAIN),
        unary("aten.log2.default", values=DOMAIN),
        unary("aten.log10.default", values=DOMAIN),
        unary("aten.log1p.default", values=_f32(DOMAIN, GENERAL)),
        unary("aten.sqrt.default", values=DOMAIN),
        unary("aten.rsqrt.default", values=DOMAIN),
        unary("aten.abs.default"),
        unary("aten.sign.default"),
        unary("aten.sin.default"),
        unary("aten.cos.default"),
        unary("aten.erf.default"),
        unary("aten.floor.default"),
        unary("aten.ceil.default"),
        unary("aten.round.default"),
        unary("aten.trunc.default"),
        # activations
        unary("aten.sigmoid.default"),
        unary("aten.tanh.default"),
        unary("aten.relu.default"),
        unary("aten.relu6.default"),
        unary("aten.silu.default"),
        unary("aten.mish.default"),
        # mish's single-exp form, densely: deep negatives (exp underflows), around 0, up to the softplus threshold
        unary("aten.mish.default", "sweep", values=_f32(np.linspace(-110.0, 25.0, 27001), [19.999, 20.0, 20.001])),
        unary("aten.hardswish.default"),
        unary("aten.hardsigmoid.default"),
        unary("aten.gelu.default"),
        unary("aten.gelu.default", "tanh", approximate="tanh"),
        unary("aten.softplus.default"),
        unary("aten.softplus.default", "beta=2-threshold=5", 2, 5),
        unary("aten.softplus.default", "beta=0.5-threshold=10", beta=0.5, threshold=10.0),
        unary("aten.leaky_relu.default"),
        unary("aten.leaky_relu.default", "slope=0.2", 0.2),
        unary("aten.hardtanh.default"),
        unary("aten.hardtanh.default", "-0.5-2.0", -0.5, 2.0),
        unary("aten.clamp.default", "min", -1.5),
        unary("aten.clamp.default", "max", max=2.0),
        unary("aten.clamp.default", "min-max", -0.5, 2.0),
        unary("aten.clamp.default", "int-bounds", -1, 1),
        unary("aten.clamp.default", "min-above-max", 2.0, -0.5),  # torch: max wins
        unary("aten.clamp_min.default", "", 0.25),
        unary("aten.clamp_max.default", "", -0.25),
        unary("aten.elu.default"),
        unary("aten.elu.default", "alpha-scale-input_scale", 0.5, 2.0, 1.5),
        unary("aten.selu.default"),
        unary("aten.threshold.default", "0.5-7", 0.5, 7.0),
        unary("aten.threshold.default", "-1-0", -1.0, 0.0),
        unary("aten.log_sigmoid.default"),
        unary("aten.celu.default"),
        unary("aten.celu.default", "alpha=0.5", 0.5),
        unary("aten.rrelu.default"),
        unary("aten.rrelu.default", "0.1-0.3", 0.1, 0.3),
        binary("aten.clamp.Tensor", "min"),
        Case("aten.clamp.Tensor", "max", (A,), {"max": B}, {"a": PAIR_A, "b": PAIR_B}),
        Case("aten.clamp.Tensor", "min-max", (A, B, C), {}, {"a": PAIR_A, "b": PAIR_B,
                                                              "c": _f32(PAIR_B[::-1]) + 1.0}),
        # more elementary functions
        unary("aten.erfc.default"),
        unary("aten.tan.default"),
        unary("aten.sinh.default"),
        unary("aten.cosh.default"),
        unary("aten.asin.default", values=_f32(GENERAL, _rng.uniform(-1.0, 1.0, 300))),
        unary("aten.acos.default", values=_f32(GENERAL, _rng.uniform(-1.0, 1.0, 300))),
        unary("aten.atan.default"),
        unary("aten.asinh.default"),
        unary("aten.acosh.default", values=_f32(GENERAL, POSITIVE + 1.0)),
        unary("aten.atanh.default", values=_f32(GENERAL, _rng.uniform(-1.0, 1.0, 300))),
        unary("aten.sgn.default"),
        unary("aten.logit.default", values=_f32(GENERAL, _rng.uniform(0.0, 1.0, 400))),
        unary("aten.logit.default", "eps=1e-6", 1e-6, values=_f32(GENERAL, _rng.uniform(0.0, 1.0, 400))),
        unary("aten.frac.default"),
        binary("aten.remainder.Tensor", a=QUOT_A, b=QUOT_B),
        with_scalar("aten.remainder.Scalar", "0.7", 0.7),
        with_scalar("aten.remainder.Scalar", "-2.5", -2.5),
        binary("aten.fmod.Tensor", a=QUOT_A, b=QUOT_B),
        with_scalar("aten.fmod.Scalar", "0.7", 0.7),
        binary("aten.lerp.Scalar", "0.3", 0.3),
        binary("aten.lerp.Scalar", "0.8", 0.8),
        Case("aten.lerp.Tensor", "", (A, B, C), {}, {"a": PAIR_A, "b": PAIR_B,
                                                     "c": _f32(_rng.uniform(-0.5, 1.5, N_PAIRS))}),
        Case("aten.addcmul.default", "", (A, B, C), {}, {"a": PAIR_A, "b": PAIR_B, "c": PAIR_B[::-1].copy()}),
        Case("aten.addcmul.default", "value=0.5", (A, B, C), {"value": 0.5},
             {"a": PAIR_A, "b": PAIR_B, "c": PAIR_B[::-1].copy()}),
        Case("aten.addcdiv.default", "value=2", (A, B, C), {"value": 2.0},
             {"a": PAIR_A, "b": PAIR_B, "c": PAIR_B[::-1].copy()}),
        binary("aten.xlogy.Tensor", b=_f32(np.abs(PAIR_B))),
        unary("aten.nan_to_num.default"),
        unary("aten.nan_to_num.default", "values", 1.5, 100.0, -7.0),
    ]
    # pow with each exponent the spelling special-cases, and one it does not; fractional ones on x >= 0.
    for exponent in (2, 3, 0.5, -1, -0.5, 1.7, 0, 1, -2.0):
        values = POSITIVE if exponent in (0.5, -0.5, 1.7) else GENERAL
        cases.append(with_scalar("aten.pow.Tensor_Scalar", f"exponent={exponent}", exponent, values))
    # comparisons, against a tensor and against scalars (exact in float32, so that float64 agrees)
    for cmp in ("gt", "lt", "ge", "le", "eq", "ne"):
        cases.append(binary(f"aten.{cmp}.Tensor", a=CMP_A, b=CMP_B))
        cases.append(with_scalar(f"aten.{cmp}.Scalar", "0.5", 0.5, CMP_A))
        cases.append(with_scalar(f"aten.{cmp}.Scalar", "int-0", 0, CMP_A))
    cases += [
        with_scalar("aten.eq.Scalar", "inf", INF, CMP_A),
        with_scalar("aten.lt.Scalar", "-inf", -INF, CMP_A),
        with_scalar("aten.ne.Scalar", "nan", NAN, CMP_A),
        with_scalar("aten.ge.Scalar", "nan", NAN, CMP_A),
    ]
    return cases


CASES = _cases()


# ---------------------------------------------------------------- host build


def spelled(case: Case) -> tuple[str, str]:
    """(C++ expression, result type) that the table gives for this case's fx node."""
    graph = fx.Graph()
    placeholders = {name: graph.placeholder(name) for name in "abc"}

    def node_or_value(v):
        return placeholders[v.name] if isinstance(v, In) else v

    node = graph.call_function(case.op, tuple(map(node_or_value, case.args)),
                               {k: node_or_value(v) for k, v in case.kwargs.items()})
    assert pointwise.is_pointwise(node), f"{case.key} is not in the pointwise table"
    return pointwise.spell(node, lambda n: n.name), pointwise.result_type(node)


def _case_function(k: int, case: Case, expr: str, result: str) -> str:
    booleans = {v.name for v in case.operands if v.boolean}
    loads = "\n".join(
        f"        const bool {n} = {n}_ptr[i] != 0.0f;" if n in booleans else f"        const float {n} = {n}_ptr[i];"
        for n in "abc")
    value = f"(({expr}) ? 1.0f : 0.0f)" if result == "bool" else f"({expr})"
    return f"""
// {case.id}
extern "C" void case_{k}(const float* a_ptr, const float* b_ptr, const float* c_ptr, float* out, int64_t n) {{
    for (int64_t i = 0; i < n; ++i) {{
{loads}
        (void)a; (void)b; (void)c;
        out[i] = {value};
    }}
}}
"""


@dataclass
class HostBuild:
    lib: ctypes.CDLL | None
    spellings: dict  # case id -> (expr, result) or the exception spelling raised
    source: str


@pytest.fixture(scope="module")
def host_build(tmp_path_factory) -> HostBuild:
    spellings: dict = {}
    parts = ["#include <cuda_runtime.h>", "#include <cstdint>", "#include <math.h>", pointwise.PRELUDE]
    for k, case in enumerate(CASES):
        try:
            expr, result = spelled(case)
        except Exception as exc:  # reported by that case's test, not by the whole module
            spellings[case.id] = exc
            continue
        spellings[case.id] = (expr, result)
        parts.append(_case_function(k, case, expr, result))
    source = "\n".join(parts)
    build = tmp_path_factory.mktemp("pointwise_host")
    (build / "file.cu").write_text(source)
    proc = subprocess.run([NVCC, "-shared", "-Xcompiler", "-fPIC", "-O2", "-o", "lib.so", "file.cu"],
                          cwd=build, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"nvcc failed on {build / 'file.cu'}:\n{proc.stderr[-4000:]}")
    lib = ctypes.CDLL(str(build / "lib.so"))
    return HostBuild(lib, spellings, source)


def run_on_host(build: HostBuild, case: Case) -> np.ndarray:
    k = CASES.index(case)
    fn = getattr(build.lib, f"case_{k}")
    fptr = ctypes.POINTER(ctypes.c_float)
    fn.argtypes = [fptr, fptr, fptr, fptr, ctypes.c_int64]
    fn.restype = None
    n = case.size
    ins = [np.ascontiguousarray(case.inputs.get(name, np.zeros(n, np.float32)), dtype=np.float32)
           for name in "abc"]
    assert all(len(x) == n for x in ins)
    out = np.full(n, 12345.0, dtype=np.float32)
    fn(*(x.ctypes.data_as(fptr) for x in ins), out.ctypes.data_as(fptr), n)
    return out.astype(np.float64)


# ---------------------------------------------------------------- reference


def torch_result(case: Case, dtype: torch.dtype) -> torch.Tensor:
    def value(v):
        if not isinstance(v, In):
            return v
        t = torch.from_numpy(case.inputs[v.name].astype(np.float64))
        return t != 0 if v.boolean else t.to(dtype)

    return case.op(*map(value, case.args), **{k: value(v) for k, v in case.kwargs.items()})


def relative_error(x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|x - ref| / max(|ref|, 1), 0 where equal (equal infinities too), NaN where either is NaN."""
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(x - ref) / np.maximum(np.abs(ref), 1.0)
    err[x == ref] = 0.0
    return err


def _describe(case: Case, idx: np.ndarray, got, ref, t32) -> str:
    rows = []
    for i in idx[:8]:
        ins = ", ".join(f"{n}={case.inputs[n][i]!r}" for n in sorted(case.inputs))
        rows.append(f"  {ins}: spelling {got[i]!r}, float64 ref {ref[i]!r}, torch float32 {t32[i]!r}")
    return "\n".join(rows)


# ---------------------------------------------------------------- tests


def test_every_table_entry_has_a_host_test():
    covered = {case.key for case in CASES}
    assert covered == set(pointwise.TABLE), (
        f"table entries without a case: {sorted(set(pointwise.TABLE) - covered)}; "
        f"cases for ops not in the table: {sorted(covered - set(pointwise.TABLE))}")


def test_case_ids_are_unique():
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_spelling_matches_torch_in_float64(host_build: HostBuild, case: Case):
    spelling = host_build.spellings[case.id]
    if isinstance(spelling, Exception):
        raise spelling
    expr, result = spelling

    out64, out32 = torch_result(case, torch.float64), torch_result(case, torch.float32)
    expected_result = "bool" if out32.dtype == torch.bool else "float"
    assert result == expected_result, f"Spelling.result is {result!r}, torch returns {out32.dtype}"

    got = run_on_host(host_build, case)
    with np.errstate(over="ignore"):  # the float64 result rounded to float32: overflow is inf there too
        ref = out64.to(torch.float64).numpy().astype(np.float32).astype(np.float64)
    t32 = out32.to(torch.float64).numpy()

    nan_mismatch = np.flatnonzero(np.isnan(got) != np.isnan(ref))
    assert nan_mismatch.size == 0, (
        f"{case.id}: `{expr}` puts NaN elsewhere than torch (float64) does, at {nan_mismatch.size} of "
        f"{got.size} elements:\n{_describe(case, nan_mismatch, got, ref, t32)}")

    # Torch's own float32 error, where it is a number: a quirk of one of its kernels (NaN for float32
    # gelu(+inf), say) sets no tolerance.
    torch_err = relative_error(t32, ref)
    torch_err = torch_err[np.isfinite(torch_err)]
    tolerance = TORCH_ERROR_FACTOR * (torch_err.max() if torch_err.size else 0.0) + ULPS_SLACK
    err = relative_error(got, ref)
    err[got == t32] = 0.0  # the very value torch returns in float32
    err[np.isnan(got) & np.isnan(ref)] = 0.0
    bad = np.flatnonzero(err > tolerance)
    worst = bad[np.argsort(-err[bad])]
    assert bad.size == 0, (
        f"{case.id}: `{expr}` is off by up to {err.max():.3g} (tolerance {tolerance:.3g}) at {bad.size} of "
        f"{got.size} elements:\n{_describe(case, worst, got, ref, t32)}")
