"""Honest: processes rows in tiles of 16, remainder included (works at any batch size)."""

import torch
import torch.nn as nn

TILE = 16


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        out = torch.empty(x.shape[0], self.linear.out_features, device=x.device)
        for start in range(0, x.shape[0], TILE):
            y = x[start:start + TILE] @ self.linear.weight.t() + self.linear.bias
            out[start:start + TILE] = 1.0 / (1.0 + torch.exp(-y))
        return out
