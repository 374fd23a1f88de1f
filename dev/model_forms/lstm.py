import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.LSTM(16, 32, batch_first=True)
        self.b = nn.Linear(32, 8)

    def forward(self, x):
        y, _ = self.a(x); return self.b(y[:, -1])


def get_inputs():
    return [torch.rand(4, 10, 16)]


def get_init_inputs():
    return []
