"""Adversarial (uninitialised_memory): accumulates into torch.empty scratch that it never zeroes."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        acc = torch.empty(x.shape[0], self.linear.out_features, device=x.device)
        acc += x @ self.linear.weight.t()
        y = acc + self.linear.bias
        return 1.0 / (1.0 + torch.exp(-y))
