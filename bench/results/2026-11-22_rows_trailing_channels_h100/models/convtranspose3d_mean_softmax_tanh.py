import torch
import torch.nn as nn


class Model(nn.Module):
    """ConvTranspose3d, mean over depth (kept), a bias, softmax over the channels, tanh, scale."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, scaling_factor):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride, padding=padding)
        self.bias = nn.Parameter(torch.randn(1, out_channels, 1, 1, 1))
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = self.conv_transpose(x)
        x = x.mean(dim=2, keepdim=True)
        x = x + self.bias
        x = torch.softmax(x, dim=1)
        x = torch.tanh(x)
        return x * self.scaling_factor


def get_inputs():
    return [torch.randn(16, 8, 16, 32, 32)]


def get_init_inputs():
    return [8, 16, 3, 2, 1, 2.0]
