import torch
import torch.nn as nn


class Model(nn.Module):
    """A 3-D convolution, sigmoid, the mean over depth, height and width (negative dims, no keepdim), a per-channel
    offset, then a softmax over the channels."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(3, 8, 3, stride=(1, 2, 2))
        self.offset = nn.Parameter(torch.randn(8))

    def forward(self, x):
        y = torch.sigmoid(self.conv(x)).mean(dim=(-3, -1, -2))
        return torch.softmax(y + self.offset, dim=1)


def get_inputs():
    return [torch.rand(2, 3, 10, 66, 66)]


def get_init_inputs():
    return []
