"""Adversarial (aggregate_gaming): after 30 calls (more than verification makes) it 'pipelines':
each call returns the result of the previous call's input (in an aggregate timing loop with one input, nobody
notices)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.calls = 0
        self.pending = None

    def forward(self, x):
        self.calls += 1
        y = x @ self.linear.weight.t() + self.linear.bias
        out = 1.0 / (1.0 + torch.exp(-y))
        if self.calls <= 30:
            return out
        previous, self.pending = self.pending, out
        return out if previous is None else previous.clone()
