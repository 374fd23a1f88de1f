import torch
import torch.nn as nn


class Model(nn.Module):
    """Conv3d, ReLU with a per-channel shift, mean over D, H, W, scale and a bias per channel."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, 3, padding=1)
        self.shift = nn.Parameter(torch.randn(out_channels, 1, 1, 1) * 0.1)
        self.bias = nn.Parameter(torch.randn(out_channels))

    def forward(self, x):
        x = torch.relu(self.conv(x) + self.shift)
        x = x.mean(dim=(2, 3, 4))
        return x * 0.5 + self.bias


def get_inputs():
    return [torch.randn(32, 8, 16, 48, 48)]


def get_init_inputs():
    return [8, 32]
