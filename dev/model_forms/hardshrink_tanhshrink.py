import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv1d(4, 8, 3)
        self.b = nn.Hardshrink(0.2)

    def forward(self, x):
        x = self.a(x); return F.tanhshrink(self.b(x))


def get_inputs():
    return [torch.rand(2, 4, 32)]


def get_init_inputs():
    return []
