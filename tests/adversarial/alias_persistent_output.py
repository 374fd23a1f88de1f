"""Adversarial (cached_output): writes every call's result into one output buffer allocated in __init__
and returns it (no allocation per call): each output is right when returned, and silently overwritten by
the next call."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.register_buffer("out", torch.empty(0), persistent=False)

    def forward(self, x):
        if self.out.shape != (x.shape[0], self.linear.out_features):
            self.out = torch.empty(x.shape[0], self.linear.out_features, device=x.device)
        torch.addmm(self.linear.bias, x, self.linear.weight.t(), out=self.out)
        return torch.sigmoid(self.out, out=self.out)
