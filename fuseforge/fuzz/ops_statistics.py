"""Chain ops that combine a value with its own statistics (x - mean, x / norm, standardising, variance and
standard deviation) and the pointwise functions of a positive argument (exp, log, sqrt, reciprocal) as models
write them: `x - x.mean(dim=1, keepdim=True)`, `F.normalize(x, dim=-1)`, `torch.log(x.abs() + 1)`.

A statistic is taken only over axes of two values or more (a standard deviation of one value is NaN), never
over the batch axis, and a division is by a value kept away from zero."""

from __future__ import annotations

from .builder import Builder
from .op import op, pick, rank_at_least
from .ops_shape import _axes, _keep, _reduced


def _wide_axes(b: Builder) -> list[int]:
    return [d for d in range(1, b.x.rank) if b.x.shape[d] >= 2]


def _has_wide_axis(b: Builder) -> bool:
    return b.x.rank >= 2 and bool(_wide_axes(b))


def _statistic_axes(b: Builder) -> tuple[list[int], str]:
    """1-2 non-batch axes of two values or more, spelled as the file would."""
    return _axes(b, 2, _wide_axes(b))


@op("center", "statistics", _has_wide_axis)
def center(b: Builder) -> None:
    """x minus its mean or its maximum over some axes (kept as size 1, so it broadcasts back)."""
    _, dims = _statistic_axes(b)
    b.emit("x = " + pick(b, f"x - x.mean(dim={dims}, keepdim=True)", f"x - torch.mean(x, {dims}, keepdim=True)",
                         f"x - x.amax(dim={dims}, keepdim=True)", f"torch.sub(x, x.mean({dims}, keepdim=True))"),
           b.x.shape)


@op("normalize", "statistics", _has_wide_axis)
def normalize(b: Builder) -> None:
    """x divided by a norm of itself along one axis."""
    d = b.rng.choice(_wide_axes(b))
    spelled = str(d - b.x.rank if b.rng.random() < 0.3 else d)
    b.emit("x = " + pick(b, f"F.normalize(x, dim={spelled})", f"F.normalize(x, p=1.0, dim={spelled})",
                         f"x / x.norm(dim={spelled}, keepdim=True).clamp_min(1e-6)",
                         f"x / (torch.linalg.vector_norm(x, dim={spelled}, keepdim=True) + 1e-6)",
                         f"x / (x.abs().sum(dim={spelled}, keepdim=True) + 1e-6)"), b.x.shape)


@op("standardize", "statistics", _has_wide_axis)
def standardize(b: Builder) -> None:
    """(x - mean) / (std + eps) over some axes, written out as a layer norm without its module."""
    _, dims = _statistic_axes(b)
    eps = b.rng.choice([1e-5, 1e-6, 1e-3])
    b.emit("x = " + pick(b, f"(x - x.mean(dim={dims}, keepdim=True)) / (x.std(dim={dims}, keepdim=True) + {eps})",
                         f"(x - x.mean({dims}, keepdim=True)) / torch.sqrt(x.var({dims}, keepdim=True, "
                         f"unbiased=False) + {eps})"), b.x.shape)


@op("var", "statistics", _has_wide_axis)
def var(b: Builder) -> None:
    axes, dims = _statistic_axes(b)
    keepdim, kd = _keep(b)
    unbiased = b.rng.choice(["", ", unbiased=False", ", correction=0"])
    b.emit("x = " + pick(b, f"torch.var(x, dim={dims}{unbiased}{kd})", f"x.var({dims}{unbiased}{kd})"),
           _reduced(b.x.shape, axes, keepdim))


@op("std", "statistics", _has_wide_axis)
def std(b: Builder) -> None:
    axes, dims = _statistic_axes(b)
    keepdim, kd = _keep(b)
    b.emit("x = " + pick(b, f"torch.std(x, dim={dims}{kd})", f"x.std({dims}{kd})"), _reduced(b.x.shape, axes, keepdim))


@op("exp", "positive", rank_at_least(1))
def exp(b: Builder) -> None:
    """exp of a bounded argument (tanh or a clamp first), so that the model stays finite at any magnitude."""
    b.emit("x = " + pick(b, "torch.exp(torch.tanh(x))", "torch.exp(x.clamp(-10.0, 10.0))", "x.tanh().exp()",
                         "torch.exp(-x * x)"), b.x.shape)


@op("log", "positive")
def log(b: Builder) -> None:
    b.emit("x = " + pick(b, "torch.log(x.abs() + 1.0)", "torch.log1p(x.abs())", "torch.log(torch.sigmoid(x))",
                         "F.logsigmoid(x)"), b.x.shape)


@op("sqrt", "positive")
def sqrt(b: Builder) -> None:
    b.emit("x = " + pick(b, "torch.sqrt(x.abs() + 1e-3)", "torch.sqrt(x * x + 1.0)", "torch.rsqrt(x.abs() + 1.0)",
                         "(x.abs() + 1e-3).sqrt()"), b.x.shape)


@op("reciprocal", "positive")
def reciprocal(b: Builder) -> None:
    b.emit("x = " + pick(b, "1.0 / (1.0 + x.abs())", "torch.reciprocal(x.abs() + 1.0)", "(x * x + 1.0).reciprocal()"),
           b.x.shape)


@op("cube", "positive")
def cube(b: Builder) -> None:
    b.emit("x = " + pick(b, "x ** 3", "torch.pow(x, 3)", "x * x * x", "x.pow(3.0)"), b.x.shape)
