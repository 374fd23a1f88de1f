import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(32, 16); self.register_buffer('scale', torch.full((16,), 0.5), persistent=False)

    def forward(self, x):
        return torch.relu(self.lin(x)) * self.scale


def get_inputs():
    return [torch.rand(16, 32)]


def get_init_inputs():
    return []
