"""Problem model of the adversarial corpus: a Linear layer, a scale and a sigmoid (a scale a candidate may
be tempted to fold into the weight once)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        return torch.sigmoid(self.linear(x) * self.scale)


batch_size = 64
in_features = 32
out_features = 64
scale = 1.7


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
