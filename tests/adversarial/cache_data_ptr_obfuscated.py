"""Adversarial (cached_output): memoises outputs by the input's address, read through getattr so that
no data_ptr() call appears in the source; returns copies."""

import torch
import torch.nn as nn

_ADDRESS = "data_" + "ptr"


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self._memo = {}

    def forward(self, x):
        key = getattr(x, _ADDRESS)()
        out = self._memo.get(key)
        if out is None:
            y = x @ self.linear.weight.t() + self.linear.bias
            out = 1.0 / (1.0 + torch.exp(-y))
            self._memo[key] = out
        return out.clone()
