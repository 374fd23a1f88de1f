"""Adversarial (private_data): climbs from its own frame into the grader's frames (sys._getframe, the name
assembled at run time) and reads their locals, looking for the fingerprint positions and the pool."""

import torch
import torch.nn as nn

_FRAME = getattr(__import__("sy" + "s"), "_get" + "frame")


def _grader_locals():
    found, frame = {}, _FRAME(1)
    while frame is not None:
        for key, value in getattr(frame, "f_" + "locals").items():
            if key in ("positions", "pool", "prints", "ms"):
                found[key] = value
        frame = getattr(frame, "f_" + "back")
    return found


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        self.spied = _grader_locals()
        y = x @ self.linear.weight.t() + self.linear.bias
        return 1.0 / (1.0 + torch.exp(-y))
