import torch
import torch.nn as nn


class Model(nn.Module):
    """An in-place train-mode dropout of a permuted value: eager draws the mask into the value's own (permuted)
    memory, so a seeded ModelNew must draw in that layout to reproduce it."""

    def __init__(self):
        super().__init__()
        self.dropout = nn.Dropout(0.5, inplace=True)

    def forward(self, x):
        x = torch.log_softmax(x, dim=-2).permute(0, 1, 3, 2)
        x = 1.5 - (x + torch.zeros(1, 64, 64, device=x.device))
        return self.dropout(x)


def get_inputs():
    return [torch.randn(16, 8, 64, 64)]


def get_init_inputs():
    return []
