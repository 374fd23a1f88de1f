"""Adversarial (monkey_patch): makes CUDA events report 1 microsecond, patched through an alias."""

import torch
import torch.nn as nn

_events = getattr(getattr(torch, "cu" + "da"), "Ev" + "ent")
setattr(_events, "elapsed_" + "time", lambda self, end: 0.001)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = x @ self.linear.weight.t() + self.linear.bias
        return 1.0 / (1.0 + torch.exp(-y))
