"""Adversarial (cached_output): builds its weight-derived constants lazily on the first call and keeps them:
right for the weights it first saw, stale after load_state_dict."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale
        self.folded = None

    def forward(self, x):
        if self.folded is None:
            with torch.no_grad():
                self.folded = ((self.linear.weight * self.scale).t().contiguous(), self.linear.bias * self.scale)
        w, b = self.folded
        return 1.0 / (1.0 + torch.exp(-(x @ w + b)))
