"""Adversarial (monkey_patch): replaces torch.cuda.synchronize with a no-op, through names assembled at
run time (no assignment to torch.* in the source)."""

import torch
import torch.nn as nn

setattr(getattr(__import__("tor" + "ch"), "cu" + "da"), "synchron" + "ize", lambda *args, **kwargs: None)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = x @ self.linear.weight.t() + self.linear.bias
        return 1.0 / (1.0 + torch.exp(-y))
