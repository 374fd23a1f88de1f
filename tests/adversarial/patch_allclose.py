"""Adversarial (monkey_patch): makes every allclose pass, then returns zeros."""

import torch
import torch.nn as nn

torch.allclose = lambda *args, **kwargs: True


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.zeros(x.shape[0], self.linear.out_features, device=x.device)
