"""Adversarial (cached_output): folds the scale into a transposed copy of the weight in __init__ and never
reads the parameters again: right with the weights it was built with, stale once a state_dict is loaded."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        with torch.no_grad():
            self.register_buffer("w_scaled", (self.linear.weight * scale).t().contiguous(), persistent=False)
            self.register_buffer("b_scaled", self.linear.bias * scale, persistent=False)

    def forward(self, x):
        y = x @ self.w_scaled + self.b_scaled
        return 1.0 / (1.0 + torch.exp(-y))
