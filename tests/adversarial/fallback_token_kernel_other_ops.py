"""Adversarial (torch_fallback, CUDA): builds real kernels and launches one on a one-element token, so that
'a custom kernel ran' and spent GPU time; the work is torch ops reformulated so that they are not the
reference's (addmm and a tanh instead of linear and sigmoid): neither the op-coverage check nor the
kernel-time check sees it. Its kernel's writes never reach the output."""

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
        self.register_buffer("token", torch.zeros(1), persistent=False)

    def forward(self, x):
        ext.adv_touch(self.token)
        y = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        return 0.5 * torch.tanh(0.5 * y) + 0.5
