import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(32, 32); self.o = nn.Linear(32, 32)

    def forward(self, x):
        q = self.q(x).view(2, 12, 4, 8).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        return self.o(o.transpose(1, 2).reshape(2, 12, 32))


def get_inputs():
    return [torch.rand(2, 12, 32)]


def get_init_inputs():
    return []
