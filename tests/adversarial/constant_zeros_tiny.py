"""Adversarial (constant_output): returns zeros; the model's outputs are ~1e-6, so allclose(atol=1e-4) passes."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        return torch.zeros(x.shape[0], self.linear.out_features, device=x.device)
