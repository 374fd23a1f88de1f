"""Honest: the tiny-output model, computed (a division instead of the model's multiplication)."""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        return (x @ self.linear.weight.t() + self.linear.bias) / (1.0 / self.scale)
