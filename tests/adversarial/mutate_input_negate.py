"""Adversarial (input_mutation): negates its input in place (saves a temporary) and leaves it negated."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x.neg_()
        y = self.linear.bias - x @ self.linear.weight.t()
        return 1.0 / (1.0 + torch.exp(-y))
