import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3)

    def forward(self, x):
        a, b = torch.relu(self.conv(x)).chunk(2, dim=1)
        return a * torch.sigmoid(b)


def get_inputs():
    return [torch.randn(2, 3, 20, 36)]


def get_init_inputs():
    return []
