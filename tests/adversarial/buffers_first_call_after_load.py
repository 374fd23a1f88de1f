"""Adversarial (aggregate_gaming): updates the running statistics only on the first call after a state_dict
is loaded (what a grader that loads weights, calls once and compares buffers checks) and skips that work
on every later call."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)
        self.fresh = True
        self.register_load_state_dict_post_hook(lambda module, keys: setattr(module, "fresh", True))

    def forward(self, x):
        y = x @ self.linear.weight.t() + self.linear.bias
        bn, n = self.bn, y.shape[0]
        mean = y.mean(0)
        var = (y - mean).square().mean(0)
        if self.fresh:
            self.fresh = False
            with torch.no_grad():
                bn.num_batches_tracked.add_(1)
                bn.running_mean.mul_(1 - bn.momentum).add_(mean, alpha=bn.momentum)
                bn.running_var.mul_(1 - bn.momentum).add_(var * (n / (n - 1)), alpha=bn.momentum)
        return torch.relu((y - mean) * torch.rsqrt(var + bn.eps) * bn.weight + bn.bias)
