import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16); self.pw = nn.Conv2d(16, 32, 1)

    def forward(self, x):
        return F.relu6(self.pw(F.relu6(self.dw(x))))


def get_inputs():
    return [torch.rand(2, 16, 32, 32)]


def get_init_inputs():
    return []
