import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 8, 3)

    def forward(self, x):
        return torch.max(self.c(x), dim=1, keepdim=True)[0] + 1


def get_inputs():
    return [torch.rand(2, 3, 16, 16)]


def get_init_inputs():
    return []
