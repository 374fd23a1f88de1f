import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(64, 64)
        self.b = nn.GLU(dim=1)

    def forward(self, x):
        x = self.a(x); return self.b(x)


def get_inputs():
    return [torch.rand(16, 64)]


def get_init_inputs():
    return []
