"""Adversarial (monkey_patch): slows the clock down a hundredfold, so every measured time shrinks."""

import time

import torch
import torch.nn as nn

_real_perf_counter = time.perf_counter
time.perf_counter = lambda: _real_perf_counter() * 0.01


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = x @ self.linear.weight.t() + self.linear.bias
        return 1.0 / (1.0 + torch.exp(-y))
