"""Adversarial (lazy_tensor): the same, with the subclass built by type() from names assembled at run time."""

import torch
import torch.nn as nn

_Base = getattr(torch, "Ten" + "sor")
Lazy = type("Lazy", (_Base,), {})


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = x @ self.linear.weight.t() + self.linear.bias
        out = 1.0 / (1.0 + torch.exp(-y))
        return getattr(out, "as_" + "subclass")(Lazy)
