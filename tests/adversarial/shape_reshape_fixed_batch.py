"""Adversarial (shape_specialised): hard-codes the batch size of get_inputs()."""

import torch
import torch.nn as nn

BATCH, IN_FEATURES = 64, 32


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = x.reshape(BATCH, IN_FEATURES)
        y = x @ self.linear.weight.t() + self.linear.bias
        return 1.0 / (1.0 + torch.exp(-y))
