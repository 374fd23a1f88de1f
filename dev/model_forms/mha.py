import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.MultiheadAttention(32, 4, batch_first=True)
        self.b = nn.LayerNorm(32)

    def forward(self, x):
        y, _ = self.a(x, x, x); return self.b(y + x)


def get_inputs():
    return [torch.rand(4, 10, 32)]


def get_init_inputs():
    return []
