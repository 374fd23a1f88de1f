import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A 3-D convolution, a group norm of 4 groups, GELU."""

    def __init__(self, in_channels=3, out_channels=16, groups=4):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, 3)
        self.norm = nn.GroupNorm(groups, out_channels)

    def forward(self, x):
        return F.gelu(self.norm(self.conv(x)))


def get_inputs():
    return [torch.rand(8, 3, 18, 34, 34)]


def get_init_inputs():
    return [3, 16, 4]
