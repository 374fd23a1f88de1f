"""The kernel families, in the order they claim anchors from the pointwise groups.

GEMMs first: an epilogue inside the GEMM saves the write and read-back of the product, which a row or channel
kernel after it cannot; then rows, then channel norms, then channel reductions and pools; convolutions last: a
conv kernel's epilogue takes the pointwise ops that no reduction, norm or pool kernel took in (where those did,
cuDNN's convolution is as fast in 2-D) -- except a convolution whose epilogue ends in a sum over its spatial axes, which
the conv family forms first (`claim_first`), before the row family would take that sum. A family's name is its folder's, its kind in plans and reports, and its command-line switch (`--no-<name>`, with dashes). Adding a
family is one folder here and one line in FAMILIES (README: "Adding a kernel family").
"""

from __future__ import annotations

from ..plan import Family
from .channel_norms import FAMILY as CHANNEL_NORMS
from .channel_reductions import FAMILY as CHANNEL_REDUCTIONS
from .conv import FAMILY as CONV
from .gemm import FAMILY as GEMM
from .rows import FAMILY as ROWS

FAMILIES: tuple[Family, ...] = (GEMM, ROWS, CHANNEL_NORMS, CHANNEL_REDUCTIONS, CONV)
NAMES = tuple(f.name for f in FAMILIES)


def named(*names: str) -> tuple[Family, ...]:
    """The families of these names, in claiming order."""
    unknown = set(names) - set(NAMES)
    if unknown:
        raise ValueError(f"no kernel family {', '.join(sorted(unknown))}; there are {', '.join(NAMES)}")
    return tuple(f for f in FAMILIES if f.name in names)


def switched_on(config) -> tuple[Family, ...]:
    """The families an OptimizeConfig turns on, in claiming order."""
    return tuple(f for f in FAMILIES if f.name in config.families)
