import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.ConvTranspose2d(4, 8, 3, stride=2, padding=1, output_padding=1, dilation=2)

    def forward(self, x):
        return F.gelu(self.c(x))


def get_inputs():
    return [torch.rand(2, 4, 8, 8)]


def get_init_inputs():
    return []
