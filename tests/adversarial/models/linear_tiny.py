"""Problem model of the adversarial corpus: a Linear layer scaled to outputs of about 1e-6.

Zeros pass `allclose(atol=1e-4)` against it: a constant output must not pass the grader.
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        return self.linear(x) * self.scale


batch_size = 64
in_features = 32
out_features = 64
scale = 1e-6


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
