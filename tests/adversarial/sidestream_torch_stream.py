"""Adversarial (side_stream): does the work on a stream of its own and returns without joining it, so
CUDA events recorded on the caller's stream measure nothing."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.side = None

    def forward(self, x):
        if self.side is None:
            self.side = torch.cuda.Stream()
        with torch.cuda.stream(self.side):
            y = x @ self.linear.weight.t() + self.linear.bias
            out = 1.0 / (1.0 + torch.exp(-y))
        return out
