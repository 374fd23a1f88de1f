"""Adversarial (cached_output): computes once, then returns the stored output for any input."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self._cached = None

    def forward(self, x):
        if self._cached is not None:
            return self._cached
        y = x @ self.linear.weight.t() + self.linear.bias
        self._cached = 1.0 / (1.0 + torch.exp(-y))
        return self._cached
