"""Honest: in-place ops, but only on its own intermediates (the input is left alone)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = x @ self.linear.weight.t()
        y.add_(self.linear.bias).neg_().exp_().add_(1.0).reciprocal_()
        return y
