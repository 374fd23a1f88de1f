import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(32, 32)

    def forward(self, x):
        w = self.lin.weight + torch.eye(32, device=x.device)
        return F.gelu(x @ w.t())


def get_inputs():
    return [torch.rand(64, 32)]


def get_init_inputs():
    return []
