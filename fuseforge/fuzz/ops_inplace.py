"""In-place chain ops (x.relu_(), x.mul_(c), x += p, F.relu(x, inplace=True), masked_fill_, ...) and random
ones that draw from the generator in train mode (dropout, randn_like noise)."""

from __future__ import annotations

from .builder import Builder
from .op import op, pick, rank_in


@op("inplace_activation", "inplace")
def inplace_activation(b: Builder) -> None:
    slope = b.rng.choice([0.01, 0.1, 0.2])
    line = pick(b, "x.relu_()", "torch.relu_(x)", "x = F.relu(x, inplace=True)", "x.sigmoid_()", "x.tanh_()",
                f"F.leaky_relu_(x, {slope})", "x = F.hardtanh(x, -0.5, 0.5, inplace=True)",
                lambda: f"x = {b.module('relu', 'nn.ReLU(inplace=True)')}(x)",
                "x = F.silu(x, inplace=True)")
    b.mutate(line)


@op("inplace_scalar", "inplace")
def inplace_scalar(b: Builder) -> None:
    c = round(b.rng.uniform(0.3, 2.5), 2)
    lo = round(b.rng.uniform(-1, 0), 2)
    b.mutate(pick(b, f"x.mul_({c})", f"x.add_({c})", f"x.sub_({c})", f"x.div_({c})", f"x *= {c}", f"x += {c}",
                  f"x -= {c}", f"x /= {c}", f"x.clamp_(min={lo}, max={c})", f"x.clamp_min_({lo})",
                  f"x.masked_fill_(x < {lo}, 0.0)", f"x[x > {c}] = {c}"))


@op("inplace_broadcast", "inplace", lambda b: b.x.rank >= 2)
def inplace_broadcast(b: Builder) -> None:
    shape = b.broadcast_shape(b.x.shape)
    shape_name = b.const("bias_shape", shape)
    p = b.module("bias", f"nn.Parameter(torch.randn({shape_name}) * 0.5)")
    b.mutate(pick(b, f"x += {p}", f"x.add_({p})", f"x.mul_({p})", f"x -= {p}", f"x *= {p}"))


def _dropout_module(b: Builder, ctor: str) -> str:
    return f"{b.module('dropout', ctor)}(x)"


@op("dropout", "random")
def dropout(b: Builder) -> None:
    p = b.rng.choice([0.1, 0.2, 0.25, 0.5])
    options = [lambda: _dropout_module(b, f"nn.Dropout({p})"),
               lambda: _dropout_module(b, f"nn.Dropout(p={b.const('dropout_p', p)})"),
               f"F.dropout(x, p={p}, training=self.training)", f"F.dropout(x, {p})",
               lambda: _dropout_module(b, f"nn.Dropout({p}, inplace=True)"),
               lambda: _dropout_module(b, f"nn.Dropout({p}).eval()")]  # in eval mode: the identity
    if b.x.rank in (4, 5):
        options.append(lambda: _dropout_module(b, f"nn.Dropout{b.x.rank - 2}d({p})"))
    b.emit("x = " + pick(b, *options), b.x.shape)


@op("random_noise", "random")
def random_noise(b: Builder) -> None:
    s = round(b.rng.uniform(0.01, 0.2), 3)
    b.emit("x = " + pick(b, f"x + torch.randn_like(x) * {s}", f"x * (torch.rand_like(x) > {s})",
                         f"x * torch.bernoulli(torch.full_like(x, {1 - s}))"), b.x.shape)


@op("channel_dropout", "random", rank_in(4, 5))
def channel_dropout(b: Builder) -> None:
    p = b.rng.choice([0.1, 0.3])
    b.emit(f"x = F.dropout{b.x.rank - 2}d(x, p={p}, training=self.training)", b.x.shape)
