import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(32, 8)

    def forward(self, x):
        idx = torch.argmax(x, dim=1)
        return self.emb(idx).sum(1) + torch.bincount(idx, minlength=8).float().sum()


def get_inputs():
    return [torch.rand(16, 32)]


def get_init_inputs():
    return []
