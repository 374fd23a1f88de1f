"""Adversarial (cached_output): caches its folded weight keyed by the parameter's address (the address
read through getattr). load_state_dict copies into the same storage, so the key never changes: the cache
goes stale on every load."""

import torch
import torch.nn as nn

_ADDRESS = "data_" + "ptr"


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale
        self.key, self.folded = None, None

    def forward(self, x):
        key = getattr(self.linear.weight, _ADDRESS)()
        if key != self.key:
            with torch.no_grad():
                self.folded = ((self.linear.weight * self.scale).t().contiguous(), self.linear.bias * self.scale)
            self.key = key
        w, b = self.folded
        return 1.0 / (1.0 + torch.exp(-(x @ w + b)))
