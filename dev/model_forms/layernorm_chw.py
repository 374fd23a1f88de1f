import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 8, 3); self.n = nn.LayerNorm([8, 14, 14])

    def forward(self, x):
        return self.n(self.c(x))


def get_inputs():
    return [torch.rand(2, 3, 16, 16)]


def get_init_inputs():
    return []
