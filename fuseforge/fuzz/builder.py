"""The model file being generated: module-level constants, `__init__` and `forward` lines, and the value
the chain has reached (its concrete shape, so that every next op is drawn only where it is valid).

The batch is always axis 0 of every value and no op reduces, moves or broadcasts against it, so a model
stays valid at any batch size (optimize verifies another one on the GPU).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Value:
    """A tensor of the forward: the Python expression naming it, its shape (batch first), its layout."""

    name: str
    shape: tuple[int, ...]
    contiguous: bool = True

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def spatial(self) -> tuple[int, ...]:
        """The axes after [batch, channels]."""
        return self.shape[2:]


@dataclass
class Input:
    name: str
    dims: list[str]  # constant names or integer literals, batch_size first; a "scalar" input: its literal
    maker: str  # "randn", "rand", "randint" (int64 in [1, 4)), "mask" (bool) or "scalar" (a Python float)

    def expr(self) -> str:
        dims = ", ".join(self.dims)
        if self.maker == "scalar":
            return self.dims[0]
        if self.maker == "randint":
            return f"torch.randint(1, 4, ({dims},))"
        if self.maker == "mask":
            return f"torch.rand({dims}) > 0.5"
        return f"torch.{self.maker}({dims})"


@dataclass
class Builder:
    rng: random.Random
    constants: dict[str, object] = field(default_factory=dict)  # module level, in order
    init_args: list[str] = field(default_factory=list)  # constants passed to Model(...), in order
    init_lines: list[str] = field(default_factory=list)
    forward_lines: list[str] = field(default_factory=list)
    inputs: list[Input] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)  # op names, in order
    saved: list[Value] = field(default_factory=list)  # earlier values a residual or an output may read
    x: Value = Value("x", ())
    outputs: list[Value] = field(default_factory=list)
    _names: set[str] = field(default_factory=set)

    # --- names ---------------------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        """A name not used yet in this file: base, base_2, base_3, ..."""
        name, n = base, 1
        while name in self._names:
            n += 1
            name = f"{base}_{n}"
        self._names.add(name)
        return name

    def const(self, base: str, value: object, init: bool = True) -> str:
        """A module-level constant (passed to Model(...) when init); returns its name."""
        name = self.fresh(base)
        self.constants[name] = value
        if init:
            self.init_args.append(name)
        return name

    def module(self, base: str, expr: str) -> str:
        """`self.NAME = expr` in __init__; returns `self.NAME`."""
        name = self.fresh(base)
        self.init_lines.append(f"self.{name} = {expr}")
        return f"self.{name}"

    def scalar(self, base: str, value: float) -> str:
        """A scalar the forward reads: an init argument kept as `self.NAME`, or a literal in the line."""
        if self.rng.random() < 0.5:
            return repr(value)
        name = self.const(base, value)
        self.init_lines.append(f"self.{name} = {name}")
        return f"self.{name}"

    # --- forward -------------------------------------------------------------------------------------
    def emit(self, line: str, shape: tuple[int, ...], contiguous: bool | None = None) -> None:
        """A forward line that assigns the next value of the chain to x. Contiguity is inherited unless
        given: ops keep their input's layout, so once a transpose made x non-contiguous every later value
        counts as non-contiguous (a view of it would raise)."""
        self.forward_lines.append(line)
        self.x = Value("x", tuple(shape), self.x.contiguous if contiguous is None else contiguous)

    def mutate(self, line: str) -> None:
        """A forward line that changes x in place (its shape and layout stay)."""
        self.forward_lines.append(line)

    def save(self) -> None:
        """Keep the current value under its own name (an alias, or sometimes a copy) for later reads."""
        name = self.fresh("r")
        copy = self.rng.random() < 0.3
        self.forward_lines.append(f"{name} = x.clone()" if copy else f"{name} = x")
        self.saved.append(Value(name, self.x.shape, self.x.contiguous))

    def batch(self) -> str:
        return self.rng.choice(["x.size(0)", "x.shape[0]"])

    # --- random helpers ------------------------------------------------------------------------------
    def odd_or_any(self, lo: int, hi: int) -> int:
        """A size in [lo, hi], odd two times in three (sizes that are not multiples of a tile)."""
        value = self.rng.randint(lo, hi)
        if self.rng.random() < 0.67 and value % 2 == 0:
            value = value + 1 if value + 1 <= hi else value - 1
        return max(lo, value)

    def axis(self, value: Value, spell_negative: bool = True) -> tuple[int, str]:
        """A random non-batch axis of `value`, and how the file spells it (sometimes negative)."""
        d = self.rng.randrange(1, value.rank)
        if spell_negative and self.rng.random() < 0.3:
            return d, str(d - value.rank)
        return d, str(d)

    def broadcast_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A shape that broadcasts to `shape` without changing it and without reading the batch axis:
        the trailing axes, each kept or 1 (e.g. [C, 1, 1] for [B, C, H, W]), at least one kept."""
        rest = shape[1:]
        while True:
            keep = [self.rng.random() < 0.5 for _ in rest]
            if any(keep):
                break
        dims = [d if k else 1 for d, k in zip(rest, keep)]
        first = next(i for i, k in enumerate(keep) if k)
        drop = self.rng.randint(0, first)  # leading 1s may be left out
        dims = dims[drop:]
        if self.rng.random() < 0.2:
            dims = [1, *dims] if len(dims) == len(rest) else dims  # explicit batch-1 axis
        return tuple(dims)


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def literal(value: object) -> str:
    if isinstance(value, float):
        return repr(round(value, 4))
    return repr(value)
