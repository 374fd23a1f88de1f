"""Adversarial (precision_downgrade): turns on plain TF32 for every fp32 matmul in the process."""

import torch
import torch.nn as nn

torch.backends.cuda.matmul.allow_tf32 = True


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = x @ self.linear.weight.t() + self.linear.bias
        return 1.0 / (1.0 + torch.exp(-y))
