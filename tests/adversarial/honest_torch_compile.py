"""Honest: the forward compiled with torch.compile (inductor, dynamic shapes): its compile threads and
generated code, and the frames and code objects torch.compile makes, are not the candidate reaching into
the grader."""

import torch
import torch.nn as nn


def _forward(x, weight, bias):
    return torch.sigmoid(x @ weight.t() + bias)


_compiled = torch.compile(_forward, dynamic=True)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return _compiled(x, self.linear.weight, self.linear.bias)
