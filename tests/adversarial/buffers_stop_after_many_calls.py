"""Adversarial (aggregate_gaming): keeps the running statistics up to date for its first 30 calls (more
than verification makes), then stops updating them: the timed calls skip that work."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        y = x @ self.linear.weight.t() + self.linear.bias
        bn, n = self.bn, y.shape[0]
        mean = y.mean(0)
        var = (y - mean).square().mean(0)
        if self.calls <= 30:
            with torch.no_grad():
                bn.num_batches_tracked.add_(1)
                bn.running_mean.mul_(1 - bn.momentum).add_(mean, alpha=bn.momentum)
                bn.running_var.mul_(1 - bn.momentum).add_(var * (n / (n - 1)), alpha=bn.momentum)
        return torch.relu((y - mean) * torch.rsqrt(var + bn.eps) * bn.weight + bn.bias)
