"""Adversarial (torch_fallback): carries CUDA source for a 'fused' kernel, never builds it, and does the
work with the very torch ops the reference uses."""

import torch
import torch.nn as nn
import torch.nn.functional as F

FUSED_SOURCE = """
__global__ void fused_linear_sigmoid(const float* x, const float* w, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 0.0f;
}
"""


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.sigmoid(F.linear(x, self.linear.weight, self.linear.bias))
