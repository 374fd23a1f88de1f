import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(32, 32); self.k = nn.Linear(32, 32); self.v = nn.Linear(32, 32)

    def forward(self, x):
        B, T, C = x.shape
        q = self.q(x); k = self.k(x); v = self.v(x)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C))
        mask = torch.tril(torch.ones(T, T, device=x.device)).view(1, T, T)
        att = att.masked_fill(mask == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        return att @ v


def get_inputs():
    return [torch.rand(4, 12, 32)]


def get_init_inputs():
    return []
