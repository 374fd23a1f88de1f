"""Honest: caches a weight-derived constant (the transposed weight), recomputed whenever the parameter
changes (its version counter or storage): caching across calls that does not depend on the inputs."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self._weight_t = None
        self._weight_key = None

    def _transposed_weight(self):
        weight = self.linear.weight
        key = (weight._version, weight.data_ptr(), weight.device)
        if key != self._weight_key:
            self._weight_t = weight.t().contiguous()
            self._weight_key = key
        return self._weight_t

    def forward(self, x):
        y = x @ self._transposed_weight() + self.linear.bias
        return 1.0 / (1.0 + torch.exp(-y))
