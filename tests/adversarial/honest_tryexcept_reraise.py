"""Honest: a try/except that only adds context and re-raises (no fallback)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        try:
            y = x @ self.linear.weight.t() + self.linear.bias
        except RuntimeError as exc:
            raise RuntimeError(f"linear+sigmoid kernel failed for input of shape {tuple(x.shape)}") from exc
        return 1.0 / (1.0 + torch.exp(-y))
