"""Honest: keeps the scaled, transposed weight across calls and rebuilds it whenever a state_dict is loaded
(in _load_from_state_dict) or the parameters are moved: caching that stays right for the weights it has."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale
        self.folded = None

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        self.folded = None

    def _apply(self, fn, *args, **kwargs):
        self.folded = None
        return super()._apply(fn, *args, **kwargs)

    def forward(self, x):
        if self.folded is None:
            with torch.no_grad():
                self.folded = ((self.linear.weight * self.scale).t().contiguous(), self.linear.bias * self.scale)
        w, b = self.folded
        return 1.0 / (1.0 + torch.exp(-(x @ w + b)))
