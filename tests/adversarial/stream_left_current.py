"""Adversarial (side_stream, CUDA): switches the current stream to one of its own inside forward (the names
assembled at run time) and leaves it there: its work, and whatever the caller launches next, runs off the
caller's stream, where the caller's timing events do not see it."""

import torch
import torch.nn as nn

_CUDA = getattr(torch, "cu" + "da")
_SET = getattr(_CUDA, "set_" + "stream")


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.side = None

    def forward(self, x):
        if self.side is None:
            self.side = getattr(_CUDA, "Str" + "eam")()
        _SET(self.side)
        y = x @ self.linear.weight.t() + self.linear.bias
        return 1.0 / (1.0 + torch.exp(-y))
