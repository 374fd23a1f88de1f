"""Adversarial (cached_output): memoises outputs in a module-level dict keyed by the input's shape, and
hands out copies (no aliasing, no stored attribute returned)."""

import torch
import torch.nn as nn

_SEEN = {}


def _compute(x, weight, bias):
    y = x @ weight.t() + bias
    return 1.0 / (1.0 + torch.exp(-y))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        key = tuple(x.shape)
        out = _SEEN.get(key)
        if out is None:
            out = _compute(x, self.linear.weight, self.linear.bias)
            _SEEN[key] = out.clone()
        return out.clone()
