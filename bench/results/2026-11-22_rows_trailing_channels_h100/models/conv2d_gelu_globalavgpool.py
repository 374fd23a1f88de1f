import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Conv2d, GELU, adaptive average pool to 1x1, squeezed to [N, C]; LayerNorm over [H, W] on a second branch."""

    def __init__(self, in_channels, out_channels, kernel_size, size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.norm = nn.LayerNorm([size, size])

    def forward(self, x):
        y = F.gelu(self.conv(x))
        pooled = F.adaptive_avg_pool2d(y, 1).squeeze(-1).squeeze(-1)
        return pooled, torch.tanh(self.norm(x))


def get_inputs():
    return [torch.randn(128, 16, 64, 64)]


def get_init_inputs():
    return [16, 32, 3, 64]
