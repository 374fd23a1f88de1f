"""Adversarial (cached_output): uses the output it returned last time as scratch space for the next call
(saving an allocation), and returns a fresh tensor: no two outputs share memory, but an output the caller
still holds changes under it."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.previous = []

    def forward(self, x):
        shape = (x.shape[0], self.linear.out_features)
        scratch = next((p for p in self.previous if p.shape == shape and p.device == x.device), None)
        if scratch is None:
            scratch = torch.empty(shape, device=x.device)
        torch.matmul(x, self.linear.weight.t(), out=scratch)
        out = 1.0 / (1.0 + torch.exp(-(scratch + self.linear.bias)))
        self.previous = [out]
        return out
