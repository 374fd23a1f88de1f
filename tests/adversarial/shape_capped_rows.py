"""Adversarial (shape_specialised): its row loop is capped at the file's batch of 64 (a grid sized for the
default shape): right at 64 rows and below, rows past 64 stay zero."""

import torch
import torch.nn as nn

MAX_ROWS = 64


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        out = torch.zeros(x.shape[0], self.linear.out_features, device=x.device)
        rows = min(x.shape[0], MAX_ROWS)
        y = x[:rows] @ self.linear.weight.t() + self.linear.bias
        out[:rows] = 1.0 / (1.0 + torch.exp(-y))
        return out
