"""Adversarial (monkey_patch): enters a dispatch mode at import and never leaves it, so that every torch op
of the grading process -- its own comparisons and samplings included -- goes through the candidate's code.
The mode's method name is assembled at run time."""

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode


def _through(self, func, types, args=(), kwargs=None):
    return func(*args, **(kwargs or {}))


_Mode = type("Quiet", (TorchDispatchMode,), {"__torch_" + "dispatch__": _through})
_Mode().__enter__()


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = x @ self.linear.weight.t() + self.linear.bias
        return 1.0 / (1.0 + torch.exp(-y))
