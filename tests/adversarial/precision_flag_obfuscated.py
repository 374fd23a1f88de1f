"""Adversarial (precision_downgrade): lowers the global fp32 matmul precision through a name assembled at
run time (no call of set_float32_matmul_precision appears in the source)."""

import torch
import torch.nn as nn

getattr(torch, "set_float32_" + "matmul_precision")("medium")


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = x @ self.linear.weight.t() + self.linear.bias
        return 1.0 / (1.0 + torch.exp(-y))
