"""A chain op: its name, its category, when it is valid (from the current value's shape and layout), and
how it writes itself into the model file (forward lines, modules, constants, the shape it leaves)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from .builder import Builder

CATEGORIES = ("pointwise", "broadcast", "reduction", "softmax", "norm", "pool", "constant", "random",
              "inplace", "view", "residual", "linear", "statistics", "positive")


@dataclass(frozen=True)
class Op:
    name: str
    category: str
    applies: Callable[[Builder], bool]
    write: Callable[[Builder], None]
    weight: float = 1.0  # within its category


REGISTRY: dict[str, Op] = {}


def always(b: Builder) -> bool:
    return True


def op(name: str, category: str, applies: Callable[[Builder], bool] = always, weight: float = 1.0):
    """Register the decorated `write(b)` as chain op `name`."""
    assert category in CATEGORIES, category

    def register(write: Callable[[Builder], None]) -> Callable[[Builder], None]:
        assert name not in REGISTRY, name
        REGISTRY[name] = Op(name, category, applies, write, weight)
        return write
    return register


# ATen's aliases of the functions spelled above (torch.multiply is torch.mul, ...): a picked spelling is written
# with its alias half the time, the coin drawn from a side stream seeded by the builder's state, so that every
# other draw of a seed stays the same
ALIASES = {"torch.mul(": "torch.multiply(", "torch.sub(": "torch.subtract(", "torch.div(": "torch.divide(",
           "torch.clamp(": "torch.clip(", "torch.abs(": "torch.absolute("}


def pick(b: Builder, *options: str | Callable[[], str]) -> str:
    """One of the spellings; a callable one is called only when picked (it may add a module)."""
    choice = b.rng.choice(options)
    if callable(choice):
        return choice()
    for name, alias in ALIASES.items():
        if choice.startswith(name):
            side = random.Random(sum((i + 1) * word for i, word in enumerate(b.rng.getstate()[1][:8])))
            return alias + choice[len(name):] if side.random() < 0.5 else choice
    return choice


def rank_at_least(n: int) -> Callable[[Builder], bool]:
    return lambda b: b.x.rank >= n


def rank_in(*ranks: int) -> Callable[[Builder], bool]:
    return lambda b: b.x.rank in ranks
