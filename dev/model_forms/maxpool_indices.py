import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(4, 8, 3)
        self.b = nn.MaxPool2d(2, return_indices=True)

    def forward(self, x):
        y, i = self.b(self.a(x)); return y * 2, i


def get_inputs():
    return [torch.rand(2, 4, 16, 16)]


def get_init_inputs():
    return []
