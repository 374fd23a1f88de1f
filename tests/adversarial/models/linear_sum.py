"""Problem model of the adversarial corpus: a matrix product, a division, a sum over the hidden features and
a scale (KernelBench's Gemm_Divide_Sum_Scaling, small): an algebraic rewrite sums the weight's rows once and
does a matrix-vector product instead."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, input_size))
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = torch.matmul(x, self.weight.T)
        x = x / 2
        x = torch.sum(x, dim=1, keepdim=True)
        return x * self.scaling_factor


batch_size = 64
input_size = 32
hidden_size = 48
scaling_factor = 1.5


def get_inputs():
    return [torch.rand(batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, scaling_factor]
