"""Problem model of the adversarial corpus (CUDA only): KernelBench's Gemm_Divide_Sum_Scaling at its own
size. Its roofline floor from the reference's FLOPs (2·1024·8192·8192 at the TF32 rate, about 0.33 ms on an
H100) is far above what the honest rewrite (the weight's rows summed once per call, then a matrix-vector
product: one read of the weight, ~0.1 ms) needs: an honest result below that floor."""

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


batch_size = 1024
input_size = 8192
hidden_size = 8192
scaling_factor = 1.5


def get_inputs():
    return [torch.rand(batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, scaling_factor]
