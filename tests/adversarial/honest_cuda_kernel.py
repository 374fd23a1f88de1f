"""Honest (CUDA): the whole model in its own kernel (double accumulation: more accurate than eager)."""

from pathlib import Path

import torch.nn as nn
from torch.utils.cpp_extension import load

_HERE = Path(__file__).parent
ext = load(name="fuseforge_adv_linear_act", sources=[str(_HERE / "kernels/linear_act.cu")])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return ext.adv_linear_sigmoid(x, self.linear.weight, self.linear.bias)
