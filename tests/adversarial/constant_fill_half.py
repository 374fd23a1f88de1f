"""Adversarial (constant_output): sigmoid outputs sit near 0.5, so return 0.5 everywhere."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.full((x.shape[0], self.linear.out_features), 0.5, device=x.device)
