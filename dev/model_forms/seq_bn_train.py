import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8))

    def forward(self, x):
        return self.net(x) + x


def get_inputs():
    return [torch.rand(4, 8, 16, 16)]


def get_init_inputs():
    return []
