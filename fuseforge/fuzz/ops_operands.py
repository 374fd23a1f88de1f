"""Chain ops with a second operand: a broadcast parameter or buffer (shape [C, 1, 1] and the like), an
extra forward input, a tensor constant built in forward, or an earlier value of the chain (residual)."""

from __future__ import annotations

from .builder import Builder, Input, Value, literal
from .op import op, pick, rank_at_least


def _operand(b: Builder, positive: bool) -> str:
    """A broadcast operand of the current value: a parameter, a buffer or an extra input."""
    shape = b.broadcast_shape(b.x.shape)
    init = "torch.rand({s}) + 0.5" if positive else "torch.randn({s})"
    kind = b.rng.choices(["parameter", "buffer", "input"], weights=[6, 2, 2])[0]
    if kind == "input":  # an input has the batch axis: [batch_size, 1, C, 1] and the like
        name = b.fresh("z")
        full = (1,) * (b.x.rank - len(shape)) + shape
        b.inputs.append(Input(name, ["batch_size", *map(str, full[1:])], "rand" if positive else "randn"))
        if positive:
            b.forward_lines.append(f"{name} = {name} + 0.5")
        return name
    shape_name = b.const("bias_shape" if not positive else "scale_shape", shape)
    tensor = init.format(s=shape_name)
    if kind == "buffer":
        attr = b.fresh("scale" if positive else "offset")
        b.init_lines.append(f"self.register_buffer({attr!r}, {tensor})")
        return f"self.{attr}"
    return b.module("scale" if positive else "bias", f"nn.Parameter({tensor})")


@op("broadcast_add", "broadcast", rank_at_least(2))
def broadcast_add(b: Builder) -> None:
    p = _operand(b, positive=False)
    b.emit("x = " + pick(b, f"x + {p}", f"{p} + x", f"torch.add(x, {p})"), b.x.shape)


@op("broadcast_sub", "broadcast", rank_at_least(2))
def broadcast_sub(b: Builder) -> None:
    p = _operand(b, positive=False)
    b.emit("x = " + pick(b, f"x - {p}", f"{p} - x", f"torch.sub(x, {p})"), b.x.shape)


@op("broadcast_mul", "broadcast", rank_at_least(2))
def broadcast_mul(b: Builder) -> None:
    p = _operand(b, positive=False)
    b.emit("x = " + pick(b, f"x * {p}", f"{p} * x", f"torch.mul(x, {p})"), b.x.shape)


@op("broadcast_div", "broadcast", rank_at_least(2))
def broadcast_div(b: Builder) -> None:
    p = _operand(b, positive=True)
    b.emit("x = " + pick(b, f"x / {p}", f"torch.div(x, {p})"), b.x.shape)


@op("broadcast_max", "broadcast", rank_at_least(2))
def broadcast_max(b: Builder) -> None:
    p = _operand(b, positive=False)
    b.emit("x = " + pick(b, f"torch.max(x, {p})", f"torch.maximum(x, {p})", f"torch.min(x, {p})",
                         f"torch.minimum({p}, x)"), b.x.shape)


def _tail(b: Builder) -> tuple[int, ...]:
    return b.broadcast_shape(b.x.shape) if b.x.rank >= 2 else ()


def _device(b: Builder, scalar: bool = True) -> str:
    """The factory's device (and dtype) arguments: a 0-d tensor may stay on the CPU (PyTorch broadcasts it to a
    CUDA tensor's device), a tensor of any other shape must be made on x's device, or the model cannot run on a
    GPU. The same three-way draw either way, so the other ops of a seed's file do not change."""
    return pick(b, "" if scalar else ", device=x.device", ", device=x.device", ", device=x.device, dtype=x.dtype")


@op("tensor_scalar", "constant")
def tensor_scalar(b: Builder) -> None:
    c = round(b.rng.uniform(-1, 1), 2)
    t = f"torch.tensor({c}{_device(b)})"
    b.emit("x = " + pick(b, f"torch.min(x, {t})", f"torch.max(x, {t})", f"torch.maximum(x, {t})",
                         f"x + {t}", f"x * {t}"), b.x.shape)


@op("tensor_ones", "constant")
def tensor_ones(b: Builder) -> None:
    shape = _tail(b)
    args = ", ".join(map(str, shape)) if shape else "()"
    b.emit("x = " + pick(b, f"x * torch.ones({args}{_device(b, False)})", f"x + torch.zeros({args}{_device(b, False)})",
                         "x * torch.ones_like(x)", "torch.where(x > 0, x, torch.zeros_like(x))"), b.x.shape)


@op("tensor_full", "constant")
def tensor_full(b: Builder) -> None:
    shape, c = _tail(b), round(b.rng.uniform(-1, 1), 2)
    b.emit("x = " + pick(b, f"x + torch.full({literal(shape)}, {c}{_device(b, False)})",
                         f"torch.min(x, torch.full({literal(shape)}, {c}{_device(b, False)}))",
                         f"x * torch.full_like(x, {c})"), b.x.shape)


def _residuals(b: Builder) -> list[Value]:
    """Saved values that broadcast to the current one without changing its shape (same rank, each
    axis equal or 1; the batch axis equal)."""
    x = b.x.shape
    return [r for r in b.saved if len(r.shape) == len(x) and r.shape[0] == x[0]
            and all(a == c or a == 1 for a, c in zip(r.shape[1:], x[1:]))]


@op("residual_add", "residual", lambda b: bool(_residuals(b)))
def residual_add(b: Builder) -> None:
    r = b.rng.choice(_residuals(b))
    b.emit("x = " + pick(b, *(s.format(r=r.name) for s in ("x + {r}", "{r} + x", "torch.add(x, {r})", "x - {r}",
                                                            "x * {r}"))),
           b.x.shape, b.x.contiguous and r.contiguous)


def _cat_partners(b: Builder) -> list[tuple[Value, int]]:
    x = b.x.shape
    return [(r, d) for r in b.saved if len(r.shape) == len(x) for d in range(1, len(x))
            if all(a == c for i, (a, c) in enumerate(zip(r.shape, x)) if i != d)]


@op("concat", "residual", lambda b: bool(_cat_partners(b)))
def concat(b: Builder) -> None:
    r, d = b.rng.choice(_cat_partners(b))
    shape = list(b.x.shape)
    shape[d] += r.shape[d]
    b.emit("x = " + pick(b, f"torch.cat([x, {r.name}], dim={d})", f"torch.cat(({r.name}, x), {d})"),
           tuple(shape), b.x.contiguous and r.contiguous)


def _input_dims(b: Builder) -> list[str]:
    """The dims of an extra input that broadcasts to the current value: the batch axis, then each axis kept or 1."""
    shape = b.broadcast_shape(b.x.shape)
    full = (1,) * (b.x.rank - len(shape)) + shape
    return ["batch_size", *map(str, full[1:])]


@op("scalar_input", "broadcast", weight=0.5)
def scalar_input(b: Builder) -> None:
    """A Python float among the inputs: get_inputs() returns [x, 0.7]."""
    name = b.fresh("scale")
    b.inputs.append(Input(name, [literal(round(b.rng.uniform(0.2, 2.0), 2))], "scalar"))
    b.emit("x = " + pick(b, f"x * {name}", f"x + {name}", f"torch.mul(x, {name})"), b.x.shape)


@op("mask_input", "broadcast", rank_at_least(2), weight=0.5)
def mask_input(b: Builder) -> None:
    """A boolean input (a mask with the batch axis) that selects values."""
    name = b.fresh("mask")
    b.inputs.append(Input(name, _input_dims(b), "mask"))
    b.emit("x = " + pick(b, f"x.masked_fill({name}, 0.0)", f"torch.where({name}, x, torch.zeros_like(x))",
                         f"x * {name}"), b.x.shape)


@op("int_input", "broadcast", rank_at_least(2), weight=0.5)
def int_input(b: Builder) -> None:
    """An integer input (int64, with the batch axis) in arithmetic with the float value."""
    name = b.fresh("counts")
    b.inputs.append(Input(name, _input_dims(b), "randint"))
    b.emit("x = " + pick(b, f"x * {name}", f"x + {name}", f"x / {name}", f"x * {name}.float()"), b.x.shape)
