"""Problem model of the adversarial corpus (CUDA only): a large Linear layer and a ReLU.

Large enough that its roofline floor (2·2048·16384·4096 FLOPs at the measured TF32 rate: about 0.65 ms on
an H100) is far above launch overheads and host round trips: a memoising cheat's hits (the grader's calls on
repeated content) fall far below it, its misses (every timed input is fresh) do not.
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


batch_size = 2048
in_features = 16384
out_features = 4096


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
