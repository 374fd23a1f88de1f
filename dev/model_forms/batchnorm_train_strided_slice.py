import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(6)

    def forward(self, x):
        y = torch.relu(self.bn(x))
        return y[:, :, ::2, 1::2] * 3.0


def get_inputs():
    return [torch.randn(4, 6, 10, 9)]


def get_init_inputs():
    return []
