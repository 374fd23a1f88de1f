"""The pointwise op table: each ATen op that a generated kernel can compute, spelled in CUDA C++.

One entry per ATen overload. A spelling receives the op's arguments bound to their schema names
(tensors as C++ expressions of type `float` or `bool`, scalars as Python values) and returns one C++
expression, or raises `NotSpellable` for argument values it does not cover. The helpers it calls
(`ff_sigmoid`, `ff_gelu_erf`, ...) are defined once in `PRELUDE`, as `__host__ __device__` functions,
so the same spelling also compiles for the CPU (the op-table tests run it there against torch).

Formulas follow PyTorch's own definitions (exact erf GELU versus the tanh approximation, softplus's
threshold, NaN propagation of relu, clamp, minimum and maximum), in precise fp32 math: no fast-math.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import fx

from .cpp_literals import cpp_float
from .cuda_sources import cuda_source


class NotSpellable(Exception):
    """The op is in the table, but not with these argument values."""


@dataclass(frozen=True)
class Spelling:
    fn: Callable[[dict], str]
    result: str = "float"  # C++ type of the result: "float" or "bool"


PRELUDE = cuda_source("fuseforge", "cuda/prelude.cuh")


def _f(x) -> str:
    if isinstance(x, str):  # already a C++ expression (a tensor operand)
        return x
    if x is None:
        raise NotSpellable("None where a number is needed")
    return cpp_float(float(x))


def _pow_scalar(base: str, exponent) -> str:
    if not isinstance(exponent, (int, float)) or isinstance(exponent, bool):
        raise NotSpellable(f"exponent {exponent!r}")
    exact = {1.0: "{b}", 2.0: "({b} * {b})", 3.0: "({b} * {b} * {b})", 0.5: "sqrtf({b})",
             -1.0: "(1.0f / {b})", -0.5: "ff_rsqrt({b})", 0.0: "1.0f"}
    if float(exponent) in exact:
        return exact[float(exponent)].format(b=base)
    return f"powf({base}, {_f(exponent)})"


def _clamp(a: dict) -> str:
    lo, hi = a["min"], a["max"]
    if lo is not None and hi is not None:
        return f"ff_clamp({a['self']}, {_f(lo)}, {_f(hi)})"
    if lo is not None:
        return f"ff_clamp_min({a['self']}, {_f(lo)})"
    if hi is not None:
        return f"ff_clamp_max({a['self']}, {_f(hi)})"
    return a["self"]


def _gelu(a: dict) -> str:
    approx = a.get("approximate", "none")
    if approx == "none":
        return f"ff_gelu_erf({a['self']})"
    if approx == "tanh":
        return f"ff_gelu_tanh({a['self']})"
    raise NotSpellable(f"gelu approximate={approx!r}")


def _div(a: dict) -> str:
    mode = a.get("rounding_mode")
    q = f"({a['self']} / {_f(a['other'])})"
    floor = f"ff_div_floor({a['self']}, {_f(a['other'])})"
    return {None: q, "trunc": f"truncf{q}", "floor": floor}.get(mode) or _raise(f"rounding_mode {mode!r}")


def _celu(a: dict) -> str:
    alpha = a["alpha"]
    if isinstance(alpha, str) or float(alpha) == 0.0:
        raise NotSpellable(f"celu alpha={alpha!r}")
    return f"ff_elu({a['self']}, {_f(alpha)}, 1.0f, {_f(1.0 / float(alpha))})"


def _clamp_tensor(a: dict) -> str:
    """clamp with tensor bounds: NaN in x or in a bound gives NaN (PyTorch's rule); max wins over min."""
    out = a["self"]
    if a["min"] is not None:
        out = f"ff_maximum({out}, {_f(a['min'])})"
    if a["max"] is not None:
        out = f"ff_minimum({out}, {_f(a['max'])})"
    return out


def _logit(a: dict) -> str:
    x = a["self"] if a["eps"] is None else f"ff_clamp({a['self']}, {_f(a['eps'])}, {_f(1.0 - float(a['eps']))})"
    return f"logf({x} / (1.0f - {x}))"


def _rrelu(a: dict) -> str:
    if a["training"]:
        raise NotSpellable("rrelu in training mode draws random slopes")
    slope = _f((float(a["lower"]) + float(a["upper"])) / 2.0)
    return f"({a['self']} > 0.0f ? {a['self']} : {a['self']} * {slope})"


def _nan_to_num(a: dict) -> str:
    big = 3.4028234663852886e38  # float32's largest finite value, torch's default for the infinities
    values = [0.0 if a["nan"] is None else a["nan"], big if a["posinf"] is None else a["posinf"],
              -big if a["neginf"] is None else a["neginf"]]
    return f"ff_nan_to_num({a['self']}, {', '.join(_f(v) for v in values)})"


def _addcmul(a: dict) -> str:
    """self + value * tensor1 * tensor2 with one rounding of the sum (fmaf), as PyTorch's kernels compile it."""
    first = a["tensor1"] if a["value"] == 1 else f"({_f(a['value'])} * {a['tensor1']})"
    return f"fmaf({first}, {a['tensor2']}, {a['self']})"


def _addcdiv(a: dict) -> str:
    """self + value * (tensor1 / tensor2), the sum fused (fmaf)."""
    return f"fmaf({_f(a['value'])}, ({a['tensor1']} / {a['tensor2']}), {a['self']})"


def _raise(msg: str) -> str:
    raise NotSpellable(msg)


def _scaled(x: str, alpha) -> str:
    return x if alpha == 1 else f"{_f(alpha)} * {x}"


def _unary(fmt: str) -> Spelling:
    return Spelling(lambda a: fmt.format(x=a["self"]))


def _compare(op: str) -> Spelling:
    return Spelling(lambda a: f"({a['self']} {op} {_f(a['other'])})", result="bool")


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946

TABLE: dict[str, Spelling] = {
    # arithmetic
    "aten.add.Tensor": Spelling(lambda a: f"({_f(a['self'])} + {_scaled(_f(a['other']), a['alpha'])})"),
    "aten.add.Scalar": Spelling(lambda a: f"({a['self']} + {_scaled(_f(a['other']), a['alpha'])})"),
    "aten.sub.Tensor": Spelling(lambda a: f"({_f(a['self'])} - {_scaled(_f(a['other']), a['alpha'])})"),
    "aten.sub.Scalar": Spelling(lambda a: f"({a['self']} - {_scaled(_f(a['other']), a['alpha'])})"),
    "aten.rsub.Scalar": Spelling(lambda a: f"({_f(a['other'])} - {_scaled(a['self'], a['alpha'])})"),
    "aten.rsub.Tensor": Spelling(lambda a: f"({_f(a['other'])} - {_scaled(a['self'], a['alpha'])})"),
    "aten.mul.Tensor": Spelling(lambda a: f"({_f(a['self'])} * {_f(a['other'])})"),
    "aten.mul.Scalar": Spelling(lambda a: f"({a['self']} * {_f(a['other'])})"),
    "aten.div.Tensor": Spelling(_div),
    "aten.div.Scalar": Spelling(_div),
    "aten.div.Tensor_mode": Spelling(_div),
    "aten.neg.default": _unary("(-{x})"),
    "aten.reciprocal.default": _unary("(1.0f / {x})"),
    "aten.square.default": _unary("({x} * {x})"),
    "aten.pow.Tensor_Scalar": Spelling(lambda a: _pow_scalar(a["self"], a["exponent"])),
    "aten.pow.Tensor_Tensor": Spelling(lambda a: f"powf({a['self']}, {a['exponent']})"),
    "aten.pow.Scalar": Spelling(lambda a: f"powf({_f(a['self'])}, {a['exponent']})"),
    "aten.minimum.default": Spelling(lambda a: f"ff_minimum({a['self']}, {a['other']})"),
    "aten.maximum.default": Spelling(lambda a: f"ff_maximum({a['self']}, {a['other']})"),
    "aten.min.other": Spelling(lambda a: f"ff_minimum({a['self']}, {a['other']})"),  # torch.min(x, y): minimum
    "aten.max.other": Spelling(lambda a: f"ff_maximum({a['self']}, {a['other']})"),
    "aten.where.self": Spelling(lambda a: f"({a['condition']} ? {a['self']} : {a['other']})"),
    "aten.where.ScalarSelf": Spelling(lambda a: f"({a['condition']} ? {_f(a['self'])} : {a['other']})"),
    "aten.where.ScalarOther": Spelling(lambda a: f"({a['condition']} ? {a['self']} : {_f(a['other'])})"),
    "aten.masked_fill.Scalar": Spelling(lambda a: f"({a['mask']} ? {_f(a['value'])} : {a['self']})"),
    "aten.clone.default": _unary("{x}"),
    "aten.remainder.Tensor": Spelling(lambda a: f"ff_remainder({a['self']}, {_f(a['other'])})"),
    "aten.remainder.Scalar": Spelling(lambda a: f"ff_remainder({a['self']}, {_f(a['other'])})"),
    "aten.fmod.Tensor": Spelling(lambda a: f"fmodf({a['self']}, {_f(a['other'])})"),
    "aten.fmod.Scalar": Spelling(lambda a: f"fmodf({a['self']}, {_f(a['other'])})"),
    "aten.lerp.Scalar": Spelling(lambda a: f"ff_lerp({a['self']}, {a['end']}, {_f(a['weight'])})"),
    "aten.lerp.Tensor": Spelling(lambda a: f"ff_lerp({a['self']}, {a['end']}, {a['weight']})"),
    "aten.addcmul.default": Spelling(_addcmul),
    "aten.addcdiv.default": Spelling(_addcdiv),
    "aten.xlogy.Tensor": Spelling(lambda a: f"ff_xlogy({a['self']}, {_f(a['other'])})"),
    "aten.nan_to_num.default": Spelling(_nan_to_num),
    "aten.frac.default": _unary("({x} - truncf({x}))"),
    # elementary functions
    "aten.exp.default": _unary("expf({x})"),
    "aten.exp2.default": _unary("exp2f({x})"),
    "aten.expm1.default": _unary("expm1f({x})"),
    "aten.log.default": _unary("logf({x})"),
    "aten.log2.default": _unary("log2f({x})"),
    "aten.log10.default": _unary("log10f({x})"),
    "aten.log1p.default": _unary("log1pf({x})"),
    "aten.sqrt.default": _unary("sqrtf({x})"),
    "aten.rsqrt.default": _unary("ff_rsqrt({x})"),
    "aten.abs.default": _unary("fabsf({x})"),
    "aten.sign.default": _unary("ff_sign({x})"),
    "aten.sin.default": _unary("sinf({x})"),
    "aten.cos.default": _unary("cosf({x})"),
    "aten.erf.default": _unary("erff({x})"),
    "aten.erfc.default": _unary("erfcf({x})"),
    "aten.tan.default": _unary("tanf({x})"),
    "aten.sinh.default": _unary("sinhf({x})"),
    "aten.cosh.default": _unary("coshf({x})"),
    "aten.asin.default": _unary("asinf({x})"),
    "aten.acos.default": _unary("acosf({x})"),
    "aten.atan.default": _unary("atanf({x})"),
    "aten.asinh.default": _unary("asinhf({x})"),
    "aten.acosh.default": _unary("acoshf({x})"),
    "aten.atanh.default": _unary("atanhf({x})"),
    "aten.sgn.default": _unary("ff_sign({x})"),
    "aten.logit.default": Spelling(_logit),
    "aten.floor.default": _unary("floorf({x})"),
    "aten.ceil.default": _unary("ceilf({x})"),
    "aten.round.default": _unary("rintf({x})"),
    "aten.trunc.default": _unary("truncf({x})"),
    # activations
    "aten.sigmoid.default": _unary("ff_sigmoid({x})"),
    "aten.tanh.default": _unary("tanhf({x})"),
    "aten.relu.default": _unary("ff_relu({x})"),
    "aten.relu6.default": _unary("ff_clamp({x}, 0.0f, 6.0f)"),
    "aten.silu.default": _unary("ff_silu({x})"),
    "aten.mish.default": _unary("ff_mish({x})"),
    "aten.hardswish.default": _unary("ff_hardswish({x})"),
    "aten.hardsigmoid.default": _unary("ff_hardsigmoid({x})"),
    "aten.gelu.default": Spelling(_gelu),
    "aten.softplus.default": Spelling(
        lambda a: f"ff_softplus({a['self']}, {_f(a['beta'])}, {_f(a['threshold'])})"),
    "aten.leaky_relu.default": Spelling(
        lambda a: f"({a['self']} > 0.0f ? {a['self']} : {a['self']} * {_f(a['negative_slope'])})"),
    "aten.hardtanh.default": Spelling(lambda a: f"ff_clamp({a['self']}, {_f(a['min_val'])}, {_f(a['max_val'])})"),
    "aten.clamp.default": Spelling(_clamp),
    "aten.clamp_min.default": Spelling(lambda a: f"ff_clamp_min({a['self']}, {_f(a['min'])})"),
    "aten.clamp_max.default": Spelling(lambda a: f"ff_clamp_max({a['self']}, {_f(a['max'])})"),
    "aten.elu.default": Spelling(
        lambda a: f"ff_elu({a['self']}, {_f(a['alpha'])}, {_f(a['scale'])}, {_f(a['input_scale'])})"),
    "aten.log_sigmoid.default": _unary("ff_log_sigmoid({x})"),
    "aten.celu.default": Spelling(_celu),
    "aten.rrelu.default": Spelling(_rrelu),
    "aten.clamp.Tensor": Spelling(_clamp_tensor),
    "aten.selu.default": _unary(f"ff_elu({{x}}, {cpp_float(_SELU_ALPHA)}, {cpp_float(_SELU_SCALE)}, 1.0f)"),
    "aten.threshold.default": Spelling(  # NaN stays NaN, like torch
        lambda a: f"({a['self']} <= {_f(a['threshold'])} ? {_f(a['value'])} : {a['self']})"),
    # comparisons (bool results, used by where)
    "aten.gt.Tensor": _compare(">"), "aten.gt.Scalar": _compare(">"),
    "aten.lt.Tensor": _compare("<"), "aten.lt.Scalar": _compare("<"),
    "aten.ge.Tensor": _compare(">="), "aten.ge.Scalar": _compare(">="),
    "aten.le.Tensor": _compare("<="), "aten.le.Scalar": _compare("<="),
    "aten.eq.Tensor": _compare("=="), "aten.eq.Scalar": _compare("=="),
    "aten.ne.Tensor": _compare("!="), "aten.ne.Scalar": _compare("!="),
}

assert math.isclose(_SELU_SCALE * _SELU_ALPHA, 1.7580993408473766)


def op_key(node: fx.Node) -> str:
    if node.target is torch.tensor:  # a tensor constant built in forward (capture.literal_constants)
        return "torch.tensor"
    return str(node.target)


def bind_arguments(node: fx.Node, operand: Callable[[fx.Node], str]) -> dict:
    """The node's arguments by schema name, defaults filled in, tensors replaced by `operand(node)`."""
    schema = node.target._schema
    bound = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            value = node.args[i]
        elif arg.name in node.kwargs:
            value = node.kwargs[arg.name]
        elif arg.has_default_value():
            value = arg.default_value
        else:
            raise NotSpellable(f"missing argument {arg.name}")
        bound[arg.name] = operand(value) if isinstance(value, fx.Node) else value
    return bound


def spell(node: fx.Node, operand: Callable[[fx.Node], str]) -> str:
    """The C++ expression computing `node` from its operands' expressions."""
    entry = TABLE.get(op_key(node))
    if entry is None:
        raise NotSpellable(f"{op_key(node)} is not in the pointwise table")
    return entry.fn(bind_arguments(node, operand))


def result_type(node: fx.Node) -> str:
    return TABLE[op_key(node)].result


def is_pointwise(node: fx.Node) -> bool:
    return node.op == "call_function" and op_key(node) in TABLE


def value_dtype(node: fx.Node) -> torch.dtype | None:
    val = node.meta.get("val")
    return val.dtype if isinstance(val, torch.Tensor) else None
