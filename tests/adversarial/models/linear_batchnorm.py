"""Problem model of the adversarial corpus: a Linear layer, a batch norm in train mode (it normalises with
the batch's statistics and updates its running statistics on every call) and a ReLU."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)

    def forward(self, x):
        return torch.relu(self.bn(self.linear(x)))


batch_size = 64
in_features = 32
out_features = 64


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
