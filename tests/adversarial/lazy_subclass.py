"""Adversarial (lazy_tensor): returns a tensor subclass that intercepts torch functions (a comparison
could be made to pass, the real work deferred until someone looks)."""

import torch
import torch.nn as nn


class LazyResult(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = x @ self.linear.weight.t() + self.linear.bias
        return torch.Tensor._make_subclass(LazyResult, 1.0 / (1.0 + torch.exp(-y)))
