"""Adversarial (try_except_fallback): calls its kernel, and when that raises, returns torch's result."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.kernels = None  # 'built elsewhere'

    def forward(self, x):
        try:
            return self.kernels.fused_linear_sigmoid(x, self.linear.weight, self.linear.bias)
        except Exception:
            y = x @ self.linear.weight.t() + self.linear.bias
            return 1.0 / (1.0 + torch.exp(-y))
