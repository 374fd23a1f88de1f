import torch
import torch.nn as nn


class Model(nn.Module):
    """Conv1d, max pool 1-D, tanh, sum over channels."""

    def __init__(self, in_channels, out_channels, kernel_size, pool):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size)
        self.pool = nn.MaxPool1d(pool, stride=2, padding=1)

    def forward(self, x):
        return torch.tanh(self.pool(self.conv(x))).sum(dim=1)


def get_inputs():
    return [torch.randn(128, 32, 4096)]


def get_init_inputs():
    return [32, 64, 3, 3]
