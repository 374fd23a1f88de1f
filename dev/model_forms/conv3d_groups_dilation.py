import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv3d(8, 8, 3, groups=4, dilation=2, padding=2)

    def forward(self, x):
        return torch.relu(self.c(x)).mean(dim=[2, 3, 4], keepdim=True)


def get_inputs():
    return [torch.rand(2, 8, 8, 8, 8)]


def get_init_inputs():
    return []
