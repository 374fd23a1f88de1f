"""The anchor: the model's first op, on the forward's inputs, with random sizes, strides, padding, groups and
dilation, each drawn so the output has at least one element per axis."""

from __future__ import annotations

import random
from collections.abc import Callable

from .builder import Builder, Input, Value


def _batch(b: Builder) -> str:
    return b.const("batch_size", b.rng.randint(2, 6), init=False)


def _input(b: Builder, name: str, dims: list[str]) -> None:
    b.inputs.append(Input(name, dims, b.rng.choice(["randn", "randn", "rand"])))
    b._names.add(name)


def linear(b: Builder) -> None:
    batch = _batch(b)
    n_in, n_out = b.odd_or_any(3, 80), b.odd_or_any(3, 80)
    in_f, out_f = b.const("in_features", n_in), b.const("out_features", n_out)
    bias = b.rng.random() < 0.85
    gemm = b.module("gemm", f"nn.Linear({in_f}, {out_f}{'' if bias else ', bias=False'})")
    if b.rng.random() < 0.2:  # a sequence axis between batch and features
        seq_len = b.odd_or_any(2, 9)
        seq = b.const("seq_len", seq_len, init=False)
        _input(b, "x", [batch, seq, in_f])
        shape = (0, seq_len, n_out)
    else:
        _input(b, "x", [batch, in_f])
        shape = (0, n_out)
    b.emit(f"x = {gemm}(x)", shape)


def matmul(b: Builder) -> None:
    """x @ W with W a parameter, or x @ y with y a second input ([B, M, K] @ [B, K, N] or [B, K] @ [K, N])."""
    batch = _batch(b)
    k, n = b.odd_or_any(3, 64), b.odd_or_any(3, 64)
    spelling = b.rng.choice(["torch.matmul({a}, {b})", "{a} @ {b}"])
    if b.rng.random() < 0.5:
        k_name, n_name = b.const("in_features", k), b.const("out_features", n)
        weight = b.module("weight", f"nn.Parameter(torch.randn({k_name}, {n_name}) * 0.1)")
        if b.rng.random() < 0.3:
            m = b.odd_or_any(2, 9)
            m_name = b.const("rows", m, init=False)
            _input(b, "x", [batch, m_name, k_name])
            shape = (0, m, n)
        else:
            _input(b, "x", [batch, k_name])
            shape = (0, n)
        b.emit("x = " + spelling.format(a="x", b=weight), shape)
    else:
        m = b.odd_or_any(2, 24)
        m_name, k_name, n_name = (b.const(base, v, init=False) for base, v in (("m", m), ("k", k), ("n", n)))
        _input(b, "x", [batch, m_name, k_name])
        _input(b, "y", [batch, k_name, n_name])
        b.emit("x = " + spelling.format(a="x", b="y"), (0, m, n))


def bmm(b: Builder) -> None:
    batch = _batch(b)
    m, k, n = b.odd_or_any(2, 24), b.odd_or_any(3, 48), b.odd_or_any(2, 24)
    m_name, k_name, n_name = b.const("m", m, init=False), b.const("k", k, init=False), b.const("n", n, init=False)
    _input(b, "x", [batch, m_name, k_name])
    _input(b, "y", [batch, k_name, n_name])
    b.emit("x = torch.bmm(x, y)", (0, m, n))


_SPATIAL_NAMES = {1: ["length"], 2: ["height", "width"], 3: ["depth", "height", "width"]}


def _conv(b: Builder, dims: int, transposed: bool) -> None:
    rng = b.rng
    batch = _batch(b)
    groups = rng.choice([1, 1, 1, 2, 3]) if rng.random() < 0.7 else 1
    c_in = groups * rng.randint(1, 8 if groups == 1 else 4)
    c_out = groups * rng.randint(1, 12 if groups == 1 else 5)
    # a quarter of the one-group convolutions (transposed ones too) get 16-64 input channels, the range of the conv
    # family's tensor-core kernel; drawn from a side stream seeded by the main one's state, so every other draw of a
    # seed stays the same
    side = random.Random(sum((i + 1) * word for i, word in enumerate(rng.getstate()[1][:8])))
    if groups == 1 and dims >= 2 and side.random() < 0.25:
        c_in = side.choice([16, 24, 32, 48, 64])
    if c_in < 2:
        c_in = groups * 2
    kmax = 3 if dims == 3 else 5
    kernel = rng.randint(1, kmax)
    stride = rng.choice([1, 1, 2, 3]) if dims < 3 else rng.choice([1, 1, 2])
    dilation = rng.choice([1, 1, 1, 2])
    padding = rng.randint(0, kernel - 1) if transposed else rng.randint(0, (dilation * (kernel - 1)) // 2 + 1)
    lo, hi = {1: (6, 40), 2: (5, 18), 3: (3, 8)}[dims]
    sizes = [b.odd_or_any(lo, hi) for _ in range(dims)]
    span = dilation * (kernel - 1) + 1
    if not transposed:
        sizes = [max(s, span - 2 * padding) for s in sizes]
        out = [(s + 2 * padding - span) // stride + 1 for s in sizes]
        output_padding = 0
    else:
        output_padding = rng.randint(0, max(stride, dilation) - 1) if rng.random() < 0.4 else 0
        sizes = [max(s, 2) for s in sizes]
        out = [(s - 1) * stride - 2 * padding + span + output_padding for s in sizes]
        if min(out) < 1:
            padding = 0
            out = [(s - 1) * stride + span + output_padding for s in sizes]
    names = [b.const(n, s, init=False) for n, s in zip(_SPATIAL_NAMES[dims], sizes)]
    ci, co = b.const("in_channels", c_in), b.const("out_channels", c_out)
    ks = b.const("kernel_size", kernel)
    args = [ci, co, ks]
    if stride != 1 or rng.random() < 0.3:
        args.append(f"stride={b.const('stride', stride)}")
    same = not transposed and stride == 1 and rng.random() < 0.1
    if same:
        args.append("padding='same'")
        out = list(sizes)
    elif padding or rng.random() < 0.3:
        args.append(f"padding={b.const('padding', padding)}")
    if output_padding:
        args.append(f"output_padding={b.const('output_padding', output_padding)}")
    if dilation != 1:
        args.append(f"dilation={b.const('dilation', dilation)}")
    if groups != 1:
        args.append(f"groups={b.const('groups', groups)}")
    if rng.random() < 0.15:
        args.append("bias=False")
    cls = f"nn.{'ConvTranspose' if transposed else 'Conv'}{dims}d"
    conv = b.module("conv_transpose" if transposed else "conv", f"{cls}({', '.join(args)})")
    _input(b, "x", [batch, ci, *names])
    b.emit(f"x = {conv}(x)", (0, c_out, *out))


def conv1d(b: Builder) -> None:
    _conv(b, 1, False)


def conv2d(b: Builder) -> None:
    _conv(b, 2, False)


def conv3d(b: Builder) -> None:
    _conv(b, 3, False)


def conv_transpose2d(b: Builder) -> None:
    _conv(b, 2, True)


def conv_transpose3d(b: Builder) -> None:
    _conv(b, 3, True)


ANCHORS: dict[str, Callable[[Builder], None]] = {
    "linear": linear, "matmul": matmul, "bmm": bmm, "conv1d": conv1d, "conv2d": conv2d, "conv3d": conv3d,
    "conv_transpose2d": conv_transpose2d, "conv_transpose3d": conv_transpose3d,
}
# drawn with these weights: GEMMs and 2-d/3-d convolutions as often as in KernelBench level 2
ANCHOR_WEIGHTS = {"linear": 4, "matmul": 2, "bmm": 1, "conv1d": 1, "conv2d": 4, "conv3d": 2,
                  "conv_transpose2d": 2, "conv_transpose3d": 2}


def start(b: Builder, name: str) -> None:
    """Write the anchor `name`; afterwards b.x is its output (the batch axis shown as size 0 until
    the generator fills in the batch size)."""
    ANCHORS[name](b)
    b.ops.append(name)
    b.x = Value("x", (b.constants["batch_size"], *b.x.shape[1:]))
