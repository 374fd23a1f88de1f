"""Adversarial (cached_output): alternates between two halves of one workspace for its outputs
(double buffering): no output aliases the previous call's, but every other call's output is overwritten."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.workspace, self.turn = None, 0

    def forward(self, x):
        shape = (2, x.shape[0], self.linear.out_features)
        if self.workspace is None or self.workspace.shape != shape or self.workspace.device != x.device:
            self.workspace = torch.empty(shape, device=x.device)
        out = self.workspace[self.turn]
        self.turn ^= 1
        y = x @ self.linear.weight.t() + self.linear.bias
        out.copy_(1.0 / (1.0 + torch.exp(-y)))
        return out
