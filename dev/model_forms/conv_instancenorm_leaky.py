import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A strided convolution, an instance norm without affine parameters, a leaky ReLU."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 5, stride=2, padding=2)
        self.norm = nn.InstanceNorm2d(8)

    def forward(self, x):
        return F.leaky_relu(self.norm(self.conv(x)), 0.2)


def get_inputs():
    return [torch.rand(16, 4, 128, 128)]


def get_init_inputs():
    return []
