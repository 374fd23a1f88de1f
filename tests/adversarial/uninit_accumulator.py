"""Adversarial (uninitialised_memory): accumulates into a persistent buffer that is zeroed once, not per
call -- right on a fresh instance, wrong from the second call on."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.acc = None

    def forward(self, x):
        if self.acc is None or self.acc.shape[0] != x.shape[0]:
            self.acc = torch.zeros(x.shape[0], self.linear.out_features, device=x.device)
        self.acc += x @ self.linear.weight.t()
        y = self.acc + self.linear.bias
        return 1.0 / (1.0 + torch.exp(-y))
