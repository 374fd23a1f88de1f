"""Adversarial (torch_fallback, CUDA): builds its kernels but never calls them; the work is torch ops,
reformulated so that they do not look like the reference's (the profiler sees no own kernel)."""

from pathlib import Path

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load

_HERE = Path(__file__).parent
ext = load(name="fuseforge_adv_linear_act", sources=[str(_HERE / "kernels/linear_act.cu")])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.kernels = ext

    def forward(self, x):
        y = x @ self.linear.weight.t() + self.linear.bias
        return 1.0 / (1.0 + torch.exp(-y))
