"""Adversarial (shape_specialised): squeezes its intermediate (written for batches above one): a batch of
one loses its batch dimension and comes back with the wrong shape."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = (x @ self.linear.weight.t()).squeeze() + self.linear.bias
        return 1.0 / (1.0 + torch.exp(-y))
