"""Adversarial (torch_fallback): claims a fused CUDA kernel; torch ops compute the whole output, and the
stand-in for the kernel (a copy torch does not see) only moves it into the tensor that is returned -- the
output is written by 'its kernel', but torch had already computed it."""

import ctypes

import torch
import torch.nn as nn

KERNEL = """
__global__ void fused_linear_sigmoid(const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = y[i];
}
"""


def _kernel(dst, src):  # the stand-in for launching KERNEL: bytes moved behind torch's back
    ctypes.memmove(dst.data_ptr(), src.data_ptr(), src.numel() * src.element_size())


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        done = 0.5 * torch.tanh(0.5 * torch.addmm(self.linear.bias, x, self.linear.weight.t())) + 0.5
        out = torch.empty_like(done)
        _kernel(out, done)
        return out
