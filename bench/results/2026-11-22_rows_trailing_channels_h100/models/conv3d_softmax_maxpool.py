import torch
import torch.nn as nn


class Model(nn.Module):
    """Conv3d, softmax over the channels, two max pools."""

    def __init__(self, in_channels, out_channels, kernel_size, pool_kernel_size):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.pool1 = nn.MaxPool3d(pool_kernel_size)
        self.pool2 = nn.MaxPool3d(pool_kernel_size)

    def forward(self, x):
        x = self.conv(x)
        x = torch.softmax(x, dim=1)
        return self.pool2(self.pool1(x))


def get_inputs():
    return [torch.randn(128, 3, 16, 32, 32)]


def get_init_inputs():
    return [3, 16, 3, 2]
