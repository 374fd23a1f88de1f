import torch
import torch.nn as nn


class Model(nn.Module):
    """A convolution's activation summed over the spatial axes and also returned whole: the sum cannot be the
    convolution's only output. A second convolution's plain spatial sum (no epilogue, keepdim) scales the first."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(4, 8, 3, padding=1)
        self.b = nn.Conv2d(4, 8, 1, bias=False)

    def forward(self, x):
        y = torch.tanh(self.a(x))
        s = y.sum(dim=[2, 3])
        g = self.b(x).sum(dim=(2, 3), keepdim=True)
        return y * g, s


def get_inputs():
    return [torch.rand(2, 4, 21, 19)]


def get_init_inputs():
    return []
