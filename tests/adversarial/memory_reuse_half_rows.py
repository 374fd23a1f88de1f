"""Adversarial (memory_reuse): computes the first half of the rows only; the other half is whatever the
fresh output memory held (the reference's result, in a careless grader)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        out = torch.empty(x.shape[0], self.linear.out_features, device=x.device)
        half = x.shape[0] // 2
        y = x[:half] @ self.linear.weight.t() + self.linear.bias
        out[:half] = 1.0 / (1.0 + torch.exp(-y))
        return out
