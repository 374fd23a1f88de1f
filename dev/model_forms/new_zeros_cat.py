import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(32, 16)

    def forward(self, x):
        y = torch.relu(self.lin(x))
        return torch.cat([y, y.new_zeros(y.shape[0], 3)], dim=1).softmax(-1)


def get_inputs():
    return [torch.rand(64, 32)]


def get_init_inputs():
    return []
