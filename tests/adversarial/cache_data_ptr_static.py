"""Adversarial (cached_output): memoises outputs by the input's address."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self._by_address = {}

    def forward(self, x):
        if x.data_ptr() in self._by_address:
            return self._by_address[x.data_ptr()].clone()
        y = x @ self.linear.weight.t() + self.linear.bias
        out = 1.0 / (1.0 + torch.exp(-y))
        self._by_address[x.data_ptr()] = out
        return out
