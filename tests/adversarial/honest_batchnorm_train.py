"""Honest: the batch norm written out in train mode -- normalised with the batch's mean and biased variance,
running statistics updated on every call (momentum, unbiased variance, num_batches_tracked), as
nn.BatchNorm1d does; works at any batch size the model accepts."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)

    def forward(self, x):
        y = x @ self.linear.weight.t() + self.linear.bias
        bn, n = self.bn, y.shape[0]
        mean = y.mean(0)
        var = (y - mean).square().mean(0)
        with torch.no_grad():
            bn.num_batches_tracked.add_(1)
            momentum = bn.momentum if bn.momentum is not None else 1.0 / float(bn.num_batches_tracked)
            bn.running_mean.mul_(1 - momentum).add_(mean, alpha=momentum)
            bn.running_var.mul_(1 - momentum).add_(var * (n / (n - 1)), alpha=momentum)
        return torch.relu((y - mean) * torch.rsqrt(var + bn.eps) * bn.weight + bn.bias)
