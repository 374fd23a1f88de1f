"""Norms (batch, group, instance, layer; train mode, random eps/momentum/affine) and pools (max, avg,
adaptive) with random kernel, stride, padding, dilation and ceil_mode, drawn so every window is valid."""

from __future__ import annotations

from .builder import Builder, literal
from .op import op, rank_at_least, rank_in


def _norm_options(b: Builder) -> str:
    opts = []
    if b.rng.random() < 0.3:
        opts.append(f"eps={b.rng.choice([1e-5, 1e-3, 0.1])}")
    return "".join(", " + o for o in opts)


@op("batch_norm", "norm", rank_in(2, 3, 4, 5))
def batch_norm(b: Builder) -> None:
    c = b.const("num_features", b.x.shape[1])
    dims = {2: 1, 3: 1, 4: 2, 5: 3}[b.x.rank]
    extra = _norm_options(b)
    if b.rng.random() < 0.3:
        extra += f", momentum={b.rng.choice([0.1, 0.01, 0.5])}"
    if b.rng.random() < 0.2:
        extra += ", affine=False"
    eval_mode = ".eval()" if b.rng.random() < 0.15 else ""  # a module in eval mode: running statistics
    bn = b.module("bn", f"nn.BatchNorm{dims}d({c}{extra}){eval_mode}")
    b.emit(f"x = {bn}(x)", b.x.shape)


def _divisors(n: int) -> list[int]:
    return [g for g in range(1, n + 1) if n % g == 0]


@op("group_norm", "norm", rank_at_least(2))
def group_norm(b: Builder) -> None:
    channels = b.x.shape[1]
    groups = b.rng.choice(_divisors(channels))
    if b.rng.random() < 0.25:
        b.emit(f"x = F.group_norm(x, {groups})", b.x.shape)
        return
    g, c = b.const("num_groups", groups), b.const("num_channels", channels)
    extra = _norm_options(b) + (", affine=False" if b.rng.random() < 0.2 else "")
    b.emit(f"x = {b.module('group_norm', f'nn.GroupNorm({g}, {c}{extra})')}(x)", b.x.shape)


@op("instance_norm", "norm", lambda b: b.x.rank in (3, 4, 5) and any(d > 1 for d in b.x.spatial))
def instance_norm(b: Builder) -> None:
    if b.rng.random() < 0.25:
        b.emit("x = F.instance_norm(x)", b.x.shape)
        return
    c = b.const("num_features", b.x.shape[1])
    extra = _norm_options(b) + (", affine=True" if b.rng.random() < 0.4 else "")
    b.emit(f"x = {b.module('instance_norm', f'nn.InstanceNorm{b.x.rank - 2}d({c}{extra})')}(x)", b.x.shape)


@op("layer_norm", "norm", rank_at_least(2))
def layer_norm(b: Builder) -> None:
    k = b.rng.randint(1, min(3, b.x.rank - 1))
    shape = b.x.shape[-k:]
    if b.rng.random() < 0.25:
        b.emit(f"x = F.layer_norm(x, {literal(tuple(shape))})", b.x.shape)
        return
    extra = _norm_options(b) + (", elementwise_affine=False" if b.rng.random() < 0.2 else "")
    name = b.const("normalized_shape", shape[0] if k == 1 and b.rng.random() < 0.5 else tuple(shape))
    b.emit(f"x = {b.module('layer_norm', f'nn.LayerNorm({name}{extra})')}(x)", b.x.shape)


def _pool_window(b: Builder, is_max: bool) -> tuple[int, int, int, int, bool] | None:
    """kernel, stride, padding, dilation, ceil_mode with a non-empty output on every spatial axis (an
    average pool's kernel no larger than the input: avg_pool3d checks that before padding)."""
    smallest = min(b.x.spatial)
    for _ in range(20):
        kernel = b.rng.randint(1, min(4, smallest + 2 if is_max else smallest))
        stride = b.rng.randint(1, kernel) if b.rng.random() < 0.8 else kernel + 1
        padding = b.rng.randint(0, kernel // 2) if b.rng.random() < 0.4 else 0
        dilation = b.rng.choice([1, 1, 2]) if is_max else 1
        ceil_mode = b.rng.random() < 0.2
        window = kernel, stride, padding, dilation, ceil_mode
        if smallest + 2 * padding >= dilation * (kernel - 1) + 1 and \
                all(_every_window_reads_the_input(s, *window) for s in b.x.spatial):
            return window
    return None


def _every_window_reads_the_input(size: int, kernel: int, stride: int, padding: int, dilation: int,
                                  ceil_mode: bool) -> bool:
    """False where some window's taps all fall in the padding (a max pool gives -inf there, an average
    pool without the padding in its count 0/0)."""
    for i in range(_pooled(size, kernel, stride, padding, dilation, ceil_mode)):
        first = i * stride - padding
        if not any(0 <= first + t * dilation < size for t in range(kernel)):
            return False
    return True


def _pooled(size: int, kernel: int, stride: int, padding: int, dilation: int, ceil_mode: bool) -> int:
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + padding:  # the last window may not start in the padding
        out -= 1
    return out


def _pool(b: Builder, kind: str) -> None:
    window = _pool_window(b, is_max=kind == "Max")
    if window is None:  # spatial axes too small for any window: a 1-wide one is always valid
        window = (1, 1, 0, 1, False)
    kernel, stride, padding, dilation, ceil_mode = window
    module = b.rng.random() < 0.6  # nn.MaxPool2d(...) with init arguments, or F.max_pool2d(x, ...) with literals
    args = [b.const("pool_kernel_size", kernel) if module else str(kernel)]
    if stride != kernel or b.rng.random() < 0.5:
        args.append(f"stride={b.const('pool_stride', stride) if module else stride}")
    if padding:
        args.append(f"padding={padding}")
    if dilation != 1:
        args.append(f"dilation={dilation}")
    if ceil_mode:
        args.append("ceil_mode=True")
    if kind == "Avg" and padding and b.rng.random() < 0.5:
        args.append("count_include_pad=False")
    dims, joined = b.x.rank - 2, ", ".join(args)
    out = tuple(_pooled(s, kernel, stride, padding, dilation, ceil_mode) for s in b.x.spatial)
    if module:
        call = f"{b.module(kind.lower() + '_pool', f'nn.{kind}Pool{dims}d({joined})')}(x)"
    else:
        call = f"F.{kind.lower()}_pool{dims}d(x, {joined})"
    b.emit(f"x = {call}", (*b.x.shape[:2], *out))


def _poolable(b: Builder) -> bool:
    return b.x.rank in (3, 4, 5)


@op("max_pool", "pool", _poolable)
def max_pool(b: Builder) -> None:
    _pool(b, "Max")


@op("avg_pool", "pool", _poolable)
def avg_pool(b: Builder) -> None:
    _pool(b, "Avg")


def _adaptive(b: Builder, kind: str) -> None:
    dims = b.x.rank - 2
    out = tuple(1 if b.rng.random() < 0.4 else b.rng.randint(1, s) for s in b.x.spatial)
    size = out[0] if len(set(out)) == 1 and b.rng.random() < 0.5 else out
    if b.rng.random() < 0.6:
        name = b.const("output_size", size)
        call = f"{b.module('pool', f'nn.Adaptive{kind}Pool{dims}d({name})')}(x)"
    else:
        call = f"F.adaptive_{kind.lower()}_pool{dims}d(x, {literal(size)})"
    b.emit(f"x = {call}", (*b.x.shape[:2], *out))


@op("adaptive_avg_pool", "pool", _poolable)
def adaptive_avg_pool(b: Builder) -> None:
    _adaptive(b, "Avg")


@op("adaptive_max_pool", "pool", _poolable)
def adaptive_max_pool(b: Builder) -> None:
    _adaptive(b, "Max")


def global_avg_pool(b: Builder, rng) -> None:
    """A CNN's head after the chain: the mean over every spatial axis of a [N, C, *spatial] value, spelled as a mean
    over those axes (positive or negative, keepdim or not) or an adaptive average pool to 1. Its draws come from
    `rng`, a stream of its own, so the rest of the model is what the seed gives without it."""
    dims = b.x.rank - 2
    axes = [a - b.x.rank if rng.random() < 0.3 else a for a in range(2, b.x.rank)]
    keepdim = rng.random() < 0.5
    spelling = rng.randrange(3)
    if spelling == 0:
        b.emit(f"x = F.adaptive_avg_pool{dims}d(x, 1)", (*b.x.shape[:2], *([1] * dims)))
        return
    kd = ", keepdim=True" if keepdim else ""
    call = f"x.mean({literal(tuple(axes))}{kd})" if spelling == 1 else f"torch.mean(x, dim={literal(axes)}{kd})"
    b.emit(f"x = {call}", (*b.x.shape[:2], *([1] * dims)) if keepdim else tuple(b.x.shape[:2]))
