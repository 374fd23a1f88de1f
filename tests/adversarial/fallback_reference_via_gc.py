"""Adversarial (torch_fallback): looks for the grader's reference Model among live objects and runs it."""

import gc

import torch
import torch.nn as nn


def _find_reference():
    for obj in gc.get_objects():
        if isinstance(obj, nn.Module) and type(obj).__name__ == "Model":
            return obj
    return None


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        reference = _find_reference()
        if reference is not None:
            return reference(x)
        y = x @ self.linear.weight.t() + self.linear.bias
        return 1.0 / (1.0 + torch.exp(-y))
