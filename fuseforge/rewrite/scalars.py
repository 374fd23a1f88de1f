"""Family `scalar folding`: multiplies and divides by a scalar move to the smallest tensor."""

from __future__ import annotations

import torch

from .engine import Builder, rule
from .guards import floating, keeps_dtype, scalar, sole_use
from .pattern import Match, Op

aten = torch.ops.aten
FAMILY = "scalar folding"
SUM_OR_MEAN = ("aten.sum.dim_IntList", "aten.mean.dim")


@rule(FAMILY,
      Op(*SUM_OR_MEAN, self=Op("aten.mul.Tensor", "aten.div.Tensor", bind="scaled", self="y", other="c"),
         dim="dims", keepdim="keepdim"),
      scalar("c"), floating("y"), sole_use("scaled"), keeps_dtype)
def scalar_out_of_reduction(m: Match, build: Builder):
    """sum(y·c) = sum(y)·c and sum(y/c) = sum(y)/c for a scalar c (the same for mean)

    The scalar is applied to the reduced result, which is smaller; a reduction that then meets a
    linear map folds into its weight.
    """
    reduced = build(m.root.target, m["y"], m["dims"], m["keepdim"])  # keeps_dtype: no dtype to pass on
    return build(m["scaled"].target, reduced, m["c"])
