"""Pointwise chain ops (activations, scalar arithmetic) in the spellings models use: torch.f(x), F.f(x),
x.f(), an nn module, or the formula written out."""

from __future__ import annotations

from .builder import Builder
from .op import op, pick


def _unary(b: Builder, expr: str) -> None:
    b.emit(f"x = {expr}", b.x.shape)


def _mod(b: Builder, base: str, ctor: str):
    return lambda: f"{b.module(base, ctor)}(x)"


def _slope(b: Builder) -> float:
    return b.rng.choice([0.01, 0.05, 0.1, 0.2, 0.3])


def _bounds(b: Builder) -> tuple[float, float]:
    lo = round(b.rng.uniform(-1.5, 0.2), 2)
    return lo, round(lo + b.rng.uniform(0.3, 2.0), 2)


@op("relu", "pointwise")
def relu(b: Builder) -> None:
    _unary(b, pick(b, "torch.relu(x)", "F.relu(x)", "x.relu()", _mod(b, "relu", "nn.ReLU()")))


@op("gelu", "pointwise")
def gelu(b: Builder) -> None:
    _unary(b, pick(b, "F.gelu(x)", "F.gelu(x, approximate='tanh')", "torch.nn.functional.gelu(x)",
                   _mod(b, "gelu", "nn.GELU()")))


@op("tanh", "pointwise")
def tanh(b: Builder) -> None:
    _unary(b, pick(b, "torch.tanh(x)", "x.tanh()", "F.tanh(x)", _mod(b, "tanh", "nn.Tanh()")))


@op("sigmoid", "pointwise")
def sigmoid(b: Builder) -> None:
    _unary(b, pick(b, "torch.sigmoid(x)", "x.sigmoid()", "F.sigmoid(x)", _mod(b, "sigmoid", "nn.Sigmoid()")))


@op("mish", "pointwise")
def mish(b: Builder) -> None:
    _unary(b, pick(b, "F.mish(x)", "x * torch.tanh(F.softplus(x))", _mod(b, "mish", "nn.Mish()")))


@op("hardswish", "pointwise")
def hardswish(b: Builder) -> None:
    _unary(b, pick(b, "F.hardswish(x)", "x * F.relu6(x + 3) / 6", _mod(b, "hardswish", "nn.Hardswish()")))


@op("leaky_relu", "pointwise")
def leaky_relu(b: Builder) -> None:
    slope = _slope(b)
    if b.rng.random() < 0.3:
        _unary(b, f"{b.module('leaky_relu', f'nn.LeakyReLU({slope})')}(x)")
        return
    s = b.scalar("negative_slope", slope)
    _unary(b, pick(b, f"F.leaky_relu(x, negative_slope={s})", f"F.leaky_relu(x, {s})",
                   f"torch.where(x > 0, x, x * {s})"))


@op("clamp", "pointwise")
def clamp(b: Builder) -> None:
    lo, hi = _bounds(b)
    form = b.rng.choice(["both", "both", "min", "max"])
    lo_s = b.scalar("clamp_min", lo) if form != "max" else ""
    hi_s = b.scalar("clamp_max", hi) if form != "min" else ""
    if form == "both":
        _unary(b, pick(b, f"torch.clamp(x, min={lo_s}, max={hi_s})", f"x.clamp({lo_s}, {hi_s})",
                       f"torch.clamp(x, {lo_s}, {hi_s})"))
    elif form == "min":
        _unary(b, pick(b, f"torch.clamp(x, min={lo_s})", f"x.clamp(min={lo_s})", f"torch.clamp_min(x, {lo_s})"))
    else:
        _unary(b, pick(b, f"torch.clamp(x, max={hi_s})", f"x.clamp(max={hi_s})"))


@op("hardtanh", "pointwise")
def hardtanh(b: Builder) -> None:
    lo, hi = _bounds(b)
    _unary(b, pick(b, lambda: f"F.hardtanh(x, min_val={b.scalar('hardtanh_min', lo)}, "
                              f"max_val={b.scalar('hardtanh_max', hi)})",
                   "F.hardtanh(x)", _mod(b, "hardtanh", f"nn.Hardtanh(min_val={lo}, max_val={hi})")))


@op("softplus", "pointwise")
def softplus(b: Builder) -> None:
    beta, threshold = b.rng.choice([1.0, 0.5, 2.0]), b.rng.choice([20.0, 5.0, 1.0])
    _unary(b, pick(b, "F.softplus(x)", f"F.softplus(x, beta={beta}, threshold={threshold})",
                   _mod(b, "softplus", f"nn.Softplus(beta={beta}, threshold={threshold})")))


@op("elu", "pointwise")
def elu(b: Builder) -> None:
    alpha = b.rng.choice([1.0, 0.5, 1.5])
    _unary(b, pick(b, "F.elu(x)", f"F.elu(x, alpha={alpha})", _mod(b, "elu", f"nn.ELU(alpha={alpha})")))


@op("selu", "pointwise")
def selu(b: Builder) -> None:
    _unary(b, pick(b, "F.selu(x)", "torch.selu(x)", _mod(b, "selu", "nn.SELU()")))


@op("silu", "pointwise")
def silu(b: Builder) -> None:
    _unary(b, pick(b, "F.silu(x)", "x * torch.sigmoid(x)", "x * x.sigmoid()", _mod(b, "silu", "nn.SiLU()")))


@op("hardsigmoid", "pointwise")
def hardsigmoid(b: Builder) -> None:
    _unary(b, pick(b, "F.hardsigmoid(x)", _mod(b, "hardsigmoid", "nn.Hardsigmoid()")))


@op("relu6", "pointwise")
def relu6(b: Builder) -> None:
    _unary(b, pick(b, "F.relu6(x)", "torch.clamp(x, 0.0, 6.0)", _mod(b, "relu6", "nn.ReLU6()")))


@op("softsign", "pointwise")
def softsign(b: Builder) -> None:
    _unary(b, pick(b, "F.softsign(x)", "x / (1 + x.abs())"))


@op("abs", "pointwise")
def abs_(b: Builder) -> None:
    _unary(b, pick(b, "torch.abs(x)", "x.abs()"))


@op("erf", "pointwise")
def erf(b: Builder) -> None:
    _unary(b, pick(b, "torch.erf(x)", "torch.special.erf(x)"))


@op("square", "pointwise")
def square(b: Builder) -> None:
    _unary(b, pick(b, "x * x", "x ** 2", "torch.square(x)", "torch.pow(x, 2)"))


@op("scalar_add", "pointwise")
def scalar_add(b: Builder) -> None:
    s = b.scalar("add_value", round(b.rng.uniform(-2, 2), 3))
    _unary(b, pick(b, f"x + {s}", f"{s} + x", f"torch.add(x, {s})"))


@op("scalar_sub", "pointwise")
def scalar_sub(b: Builder) -> None:
    s = b.scalar("subtract_value", round(b.rng.uniform(-2, 2), 3))
    _unary(b, pick(b, f"x - {s}", f"{s} - x", f"torch.sub(x, {s})"))


@op("scalar_mul", "pointwise")
def scalar_mul(b: Builder) -> None:
    s = b.scalar("scaling_factor", round(b.rng.uniform(-3, 3), 3) or 0.5)
    _unary(b, pick(b, f"x * {s}", f"{s} * x", f"torch.mul(x, {s})"))


@op("scalar_div", "pointwise")
def scalar_div(b: Builder) -> None:
    s = b.scalar("divisor", b.rng.choice([2.0, 3.0, 0.5, 1.7, -4.0]))
    _unary(b, pick(b, f"x / {s}", f"torch.div(x, {s})", f"x.div({s})"))


@op("smooth_activation", "pointwise")
def smooth_activation(b: Builder) -> None:
    """Less common continuous functions: celu, softshrink, tanhshrink, rrelu at its mean slope (training=False),
    atan, asinh, erfc, lerp and addcmul with a function of x."""
    alpha = b.rng.choice([0.5, 1.0, 1.3])
    _unary(b, pick(b, f"F.celu(x, alpha={alpha})", "F.softshrink(x, 0.3)", "F.tanhshrink(x)",
                   "F.rrelu(x, training=False)", "torch.atan(x)", "torch.asinh(x)", "torch.erfc(x)",
                   "torch.lerp(x, torch.tanh(x), 0.3)", "torch.addcmul(x, x, torch.sigmoid(x), value=0.5)"))
