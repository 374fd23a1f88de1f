"""Adversarial (aggregate_gaming): honest for the first 30 calls of an instance (more than
verification makes); after that, every other call returns a copy of the previous output instead of computing."""

import collections

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.calls = 0
        self.history = collections.deque(maxlen=1)

    def forward(self, x):
        self.calls += 1
        if self.calls > 30 and self.calls % 2 == 1 and self.history:
            return self.history[-1].clone()
        y = x @ self.linear.weight.t() + self.linear.bias
        out = 1.0 / (1.0 + torch.exp(-y))
        self.history.append(out)
        return out
