"""Adversarial (try_except_fallback): if the kernel does not build, silently use torch instead."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = """
__global__ void fused_linear_sigmoid_kernel(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 1.0f / (1.0f + expf(-x[i]));
}
torch::Tensor fused_linear_sigmoid(torch::Tensor x) { return x; }
"""

try:
    ext = load_inline(name="adv_tryexcept_build", cpp_sources="torch::Tensor fused_linear_sigmoid(torch::Tensor x);",
                      cuda_sources=SOURCE, functions=["fused_linear_sigmoid"])
except Exception:
    ext = None


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = x @ self.linear.weight.t() + self.linear.bias
        if ext is not None:
            return ext.fused_linear_sigmoid(y)
        return 1.0 / (1.0 + torch.exp(-y))
