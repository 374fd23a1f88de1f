"""Chain ops that change the shape: reductions over random axes with random keepdim, softmax-like ops along
a random axis, views and reshapes, and a linear layer over the last axis. None reads the batch axis."""

from __future__ import annotations

from .builder import Builder
from .op import op, pick, rank_at_least


def _axes(b: Builder, most: int = 3, among: list[int] | None = None) -> tuple[list[int], str]:
    """1..most distinct non-batch axes (of `among`, by default all), and their spelling (int, tuple or list, sometimes
    negative)."""
    x = b.x
    among = range(1, x.rank) if among is None else among
    k = b.rng.randint(1, min(most, len(among)))
    axes = sorted(b.rng.sample(among, k))
    negative = b.rng.random() < 0.25
    spelled = [a - x.rank if negative else a for a in axes]
    if k == 1 and b.rng.random() < 0.6:
        return axes, str(spelled[0])
    text = ", ".join(map(str, spelled))
    return axes, b.rng.choice([f"({text},)" if k == 1 else f"({text})", f"[{text}]"])


def _reduced(shape: tuple[int, ...], axes: list[int], keepdim: bool) -> tuple[int, ...]:
    if keepdim:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _keep(b: Builder) -> tuple[bool, str]:
    keepdim = b.rng.random() < 0.5
    if not keepdim and b.rng.random() < 0.5:
        return False, ""
    return keepdim, f", keepdim={keepdim}"


def _reduction(b: Builder, fn: str, most: int = 3) -> None:
    axes, dims = _axes(b, most)
    keepdim, kd = _keep(b)
    b.emit("x = " + pick(b, f"torch.{fn}(x, dim={dims}{kd})", f"x.{fn}({dims}{kd})"),
           _reduced(b.x.shape, axes, keepdim))


@op("sum", "reduction", rank_at_least(2))
def sum_(b: Builder) -> None:
    _reduction(b, "sum")


@op("mean", "reduction", rank_at_least(2))
def mean(b: Builder) -> None:
    _reduction(b, "mean")


@op("amax", "reduction", rank_at_least(2))
def amax(b: Builder) -> None:
    _reduction(b, "amax")


@op("amin", "reduction", rank_at_least(2))
def amin(b: Builder) -> None:
    _reduction(b, "amin")


@op("logsumexp", "reduction", rank_at_least(2))
def logsumexp(b: Builder) -> None:
    _reduction(b, "logsumexp")


def _extremum(b: Builder, fn: str) -> None:
    d, spelled = b.axis(b.x)
    keepdim, kd = _keep(b)
    b.emit("x = " + pick(b, f"torch.{fn}(x, dim={spelled}{kd})[0]", f"x.{fn}(dim={spelled}{kd}).values",
                         f"torch.{fn}(x, {spelled}{kd})[0]"), _reduced(b.x.shape, [d], keepdim))


@op("max_dim", "reduction", rank_at_least(2))
def max_dim(b: Builder) -> None:
    _extremum(b, "max")


@op("min_dim", "reduction", rank_at_least(2))
def min_dim(b: Builder) -> None:
    _extremum(b, "min")


def _softmax_like(b: Builder, fn: str, module: str) -> None:
    d, spelled = b.axis(b.x)
    b.emit("x = " + pick(b, f"torch.{fn}(x, dim={spelled})", f"F.{fn}(x, dim={spelled})", f"x.{fn}({spelled})",
                         lambda: f"{b.module(fn, f'nn.{module}(dim={spelled})')}(x)"), b.x.shape)


@op("softmax", "softmax", rank_at_least(2))
def softmax(b: Builder) -> None:
    _softmax_like(b, "softmax", "Softmax")


@op("log_softmax", "softmax", rank_at_least(2))
def log_softmax(b: Builder) -> None:
    _softmax_like(b, "log_softmax", "LogSoftmax")


def _view(b: Builder, dims: list[str]) -> str:
    """x.view(...) where x is contiguous, else a reshape (a view of a transposed value would raise)."""
    args = ", ".join(dims)
    if b.x.contiguous:
        return pick(b, f"x.view({args})", f"x.reshape({args})", f"x.contiguous().view({args})")
    return pick(b, f"x.reshape({args})", f"x.contiguous().view({args})", f"torch.reshape(x, ({args}))")


@op("flatten", "view", rank_at_least(3))
def flatten(b: Builder) -> None:
    rest = 1
    for d in b.x.shape[1:]:
        rest *= d
    b.emit("x = " + pick(b, lambda: _view(b, [b.batch(), "-1"]), "torch.flatten(x, 1)", "x.flatten(1)",
                         lambda: f"{b.module('flatten', 'nn.Flatten()')}(x)"), (b.x.shape[0], rest))


@op("flatten_spatial", "view", rank_at_least(4))
def flatten_spatial(b: Builder) -> None:
    rest = 1
    for d in b.x.shape[2:]:
        rest *= d
    c = b.x.shape[1]
    b.emit("x = " + pick(b, lambda: _view(b, [b.batch(), str(c), "-1"]), "torch.flatten(x, 2)",
                         "x.flatten(start_dim=2)"), (b.x.shape[0], c, rest))


def _splits(n: int) -> list[int]:
    return [f for f in range(2, n) if n % f == 0]


@op("unflatten", "view", lambda b: b.x.rank in (2, 3) and bool(_splits(b.x.shape[-1])))
def unflatten(b: Builder) -> None:
    last = b.x.shape[-1]
    f = b.rng.choice(_splits(last))
    kept = [str(d) for d in b.x.shape[1:-1]]
    shape = (*b.x.shape[:-1], f, last // f)
    options = [lambda: _view(b, [b.batch(), *kept, str(f), str(last // f)]),
               lambda: _view(b, [b.batch(), *kept, str(f), "-1"])]
    if b.x.contiguous:
        options.append(f"x.unflatten(-1, ({f}, {last // f}))")
    b.emit("x = " + pick(b, *options), shape)


@op("unsqueeze", "view", lambda b: b.x.rank <= 4, weight=0.4)
def unsqueeze(b: Builder) -> None:
    d = b.rng.randint(1, b.x.rank)
    shape = (*b.x.shape[:d], 1, *b.x.shape[d:])
    options = [f"x.unsqueeze({d})", f"torch.unsqueeze(x, {d})", f"x.unsqueeze({d - b.x.rank - 1})"]
    if d == 1:
        options.append("x[:, None]")
    b.emit("x = " + pick(b, *options), shape)


def _unit_axes(b: Builder) -> list[int]:
    return [i for i, d in enumerate(b.x.shape) if i > 0 and d == 1]


@op("squeeze", "view", lambda b: bool(_unit_axes(b)), weight=2)
def squeeze(b: Builder) -> None:
    d = b.rng.choice(_unit_axes(b))
    shape = tuple(s for i, s in enumerate(b.x.shape) if i != d)
    b.emit("x = " + pick(b, f"x.squeeze({d})", f"torch.squeeze(x, {d})", f"x.squeeze(dim={d - b.x.rank})"), shape)


@op("transpose", "view", rank_at_least(3))
def transpose(b: Builder) -> None:
    i, j = sorted(b.rng.sample(range(1, b.x.rank), 2))
    shape = list(b.x.shape)
    shape[i], shape[j] = shape[j], shape[i]
    order = list(range(b.x.rank))
    order[i], order[j] = order[j], order[i]
    line = pick(b, f"x.transpose({i}, {j})", f"torch.transpose(x, {i}, {j})", f"x.permute({', '.join(map(str, order))})")
    contiguous = b.rng.random() < 0.3
    b.emit("x = " + line + (".contiguous()" if contiguous else ""), tuple(shape), contiguous)


@op("linear_head", "linear", rank_at_least(2))
def linear_head(b: Builder) -> None:
    n_in, n_out = b.x.shape[-1], b.odd_or_any(3, 48)
    i, o = b.const("hidden_in", n_in), b.const("hidden_out", n_out)
    line = pick(b, lambda: f"{b.module('fc', f'nn.Linear({i}, {o})')}(x)",
                lambda: f"x @ {b.module('proj', f'nn.Parameter(torch.randn({i}, {o}) * 0.1)')}",
                lambda: f"F.linear(x, {b.module('proj', f'nn.Parameter(torch.randn({o}, {i}) * 0.1)')})")
    b.emit("x = " + line, (*b.x.shape[:-1], n_out))
