"""Adversarial (precision_downgrade): leaves the fp32 matmul precision lowered after every odd call and puts
it back after every even one: a grader that reads the flags only at the end sees them as they were."""

import torch
import torch.nn as nn

_SET = getattr(torch, "set_float32_matmul_" + "precision")


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        y = x @ self.linear.weight.t() + self.linear.bias
        _SET("hi" + "gh" if self.calls % 2 else "high" + "est")
        return 1.0 / (1.0 + torch.exp(-y))
