"""Adversarial (input_mutation): on its first call it folds the scale into the Linear layer's weight and
bias in place, and skips the multiplication from then on: every output is right, but its parameters are
no longer the model's (its state_dict is the scaled one)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale
        self.folded = False

    def forward(self, x):
        if not self.folded:
            with torch.no_grad():
                self.linear.weight.mul_(self.scale)
                self.linear.bias.mul_(self.scale)
            self.folded = True
        y = x @ self.linear.weight.t() + self.linear.bias
        return 1.0 / (1.0 + torch.exp(-y))
