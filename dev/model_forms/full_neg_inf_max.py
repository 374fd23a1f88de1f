import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(32, 16)

    def forward(self, x):
        m = torch.full((x.shape[0], 1), float('-inf'), device=x.device)
        return torch.maximum(self.lin(x).amax(dim=1, keepdim=True), m) * 2


def get_inputs():
    return [torch.rand(64, 32)]


def get_init_inputs():
    return []
