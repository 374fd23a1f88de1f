import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        y = torch.amax(torch.relu(self.conv(x)), dim=1, keepdim=True)
        return y.expand(-1, 4, -1, -1) + x[:, :4]


def get_inputs():
    return [torch.randn(2, 8, 12, 12)]


def get_init_inputs():
    return []
