import torch
import torch.nn as nn


class Model(nn.Module):
    """A convolution block in train mode: convolution, batch norm (running statistics updated), ReLU."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def get_inputs():
    return [torch.rand(32, 3, 96, 96)]


def get_init_inputs():
    return []
