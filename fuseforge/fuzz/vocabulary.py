"""Every chain op by name (importing the op modules registers them) and how often each category is drawn."""

from __future__ import annotations

from . import ops_inplace, ops_norm_pool, ops_operands, ops_pointwise, ops_shape, ops_statistics  # noqa: F401
from .anchors import ANCHOR_WEIGHTS, ANCHORS
from .op import CATEGORIES, REGISTRY, Op

OPS: dict[str, Op] = dict(REGISTRY)

# how often a category is drawn when one of its ops applies; the op is then uniform within it
CATEGORY_WEIGHTS: dict[str, float] = {
    "pointwise": 4, "broadcast": 2, "reduction": 2, "softmax": 1, "norm": 2, "pool": 1.5, "constant": 1.5,
    "random": 1, "inplace": 1.5, "view": 2, "residual": 1.5, "linear": 0.7, "statistics": 1.5, "positive": 1.5,
}
assert set(CATEGORY_WEIGHTS) == set(CATEGORIES)

__all__ = ["ANCHORS", "ANCHOR_WEIGHTS", "CATEGORY_WEIGHTS", "OPS", "Op"]
