"""Adversarial (input_mutation): uses the input as scratch space (halves it in place) and compensates."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x.mul_(0.5)
        y = 2.0 * (x @ self.linear.weight.t()) + self.linear.bias
        return 1.0 / (1.0 + torch.exp(-y))
