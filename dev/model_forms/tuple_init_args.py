import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride)
        self.scale = scale

    def forward(self, x):
        return torch.sigmoid(self.conv(x)) * self.scale


def get_inputs():
    return [torch.rand(2, 3, 17, 19)]


def get_init_inputs():
    return [3, 8, (3, 5), (2, 1), 0.5]
