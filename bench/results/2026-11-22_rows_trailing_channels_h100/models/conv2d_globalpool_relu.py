import torch
import torch.nn as nn


class Model(nn.Module):
    """Conv2d with stride 2, tanh, adaptive max pool to 1x1, ReLU; a second branch: adaptive average pool 1-D."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, stride=2)
        self.pool = nn.AdaptiveMaxPool2d((1, 1))
        self.pool1d = nn.AdaptiveAvgPool1d(1)

    def forward(self, x, y):
        a = torch.relu(self.pool(torch.tanh(self.conv(x)))).flatten(1)
        b = torch.sigmoid(self.pool1d(y * 2.0)).squeeze(-1)
        return a, b


def get_inputs():
    return [torch.randn(64, 32, 129, 129), torch.randn(256, 512, 1024)]


def get_init_inputs():
    return [32, 64]
