import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 3, 3, 3) * 0.1); self.b = nn.Parameter(torch.zeros(8))

    def forward(self, x):
        return torch.relu(F.conv2d(x, self.w, self.b, stride=2, padding=1))


def get_inputs():
    return [torch.rand(4, 3, 16, 16)]


def get_init_inputs():
    return []
