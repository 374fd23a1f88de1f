import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv3d(3, 8, 3); self.n = nn.BatchNorm3d(8)

    def forward(self, x):
        return F.silu(self.n(self.c(x)))


def get_inputs():
    return [torch.rand(2, 3, 8, 8, 8)]


def get_init_inputs():
    return []
