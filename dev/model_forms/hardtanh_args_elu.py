import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(32, 16)

    def forward(self, x):
        return F.elu(F.hardtanh(self.l(x), min_val=-0.5, max_val=0.5), alpha=0.3)


def get_inputs():
    return [torch.rand(16, 32)]


def get_init_inputs():
    return []
