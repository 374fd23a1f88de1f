"""Adversarial (private_data): reads its parent process -- the grader -- through /proc, in plain sight: the
static check names it before anything runs."""

import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            self.grader = f.read()

    def forward(self, x):
        y = x @ self.linear.weight.t() + self.linear.bias
        return 1.0 / (1.0 + torch.exp(-y))
