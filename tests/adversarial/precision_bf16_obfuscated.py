"""Adversarial (precision_downgrade): the matrix product in bf16, the dtype looked up at run time."""

import torch
import torch.nn as nn

_LOW = getattr(torch, "bfloat" + "16")


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = (x.to(_LOW) @ self.linear.weight.t().to(_LOW)).float() + self.linear.bias
        return 1.0 / (1.0 + torch.exp(-y))
