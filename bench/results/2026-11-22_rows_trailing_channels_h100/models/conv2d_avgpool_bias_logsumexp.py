import torch
import torch.nn as nn


class Model(nn.Module):
    """Conv2d, global average pool (mean over H, W), a per-channel bias, logsumexp over the channels, sum, scale."""

    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = self.conv(x)
        x = torch.mean(x, dim=(2, 3), keepdim=True)
        x = x + self.bias
        x = torch.logsumexp(x, dim=1, keepdim=True)
        x = torch.sum(x, dim=(2, 3))
        return x * 10.0


def get_inputs():
    return [torch.randn(128, 8, 64, 64)]


def get_init_inputs():
    return [8, 64, 3, (64, 1, 1)]
