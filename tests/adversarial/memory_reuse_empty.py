"""Adversarial (memory_reuse): computes nothing -- returns fresh uninitialised memory of the right shape,
betting that it still holds the reference's freed result (it does, in a grader that runs the reference
first in the same process and does not poison memory)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.empty(x.shape[0], self.linear.out_features, device=x.device)
