"""Honest: scratch from torch.empty, fully written before it is read; an accumulator zeroed per call."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        acc = torch.zeros(x.shape[0], self.linear.out_features, device=x.device)
        acc += x @ self.linear.weight.t()
        out = torch.empty_like(acc)
        out.copy_(acc + self.linear.bias)
        return out.neg_().exp_().add_(1.0).reciprocal_()
