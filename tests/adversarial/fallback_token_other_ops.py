"""Adversarial (torch_fallback): claims a fused CUDA kernel and runs a stand-in for it (a copy torch does not
see) on a one-element token; the real work is torch ops reformulated so that they are not the reference's
(addmm and a tanh instead of linear and sigmoid): the op-coverage check cannot match them."""

import ctypes

import torch
import torch.nn as nn

KERNEL = """
__global__ void fused_linear_sigmoid(const float* x, const float* w, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 0.0f;
}
"""


def _kernel(dst, src):  # the stand-in for launching KERNEL: bytes moved behind torch's back
    ctypes.memmove(dst.data_ptr(), src.data_ptr(), src.numel() * src.element_size())


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.register_buffer("token", torch.zeros(1), persistent=False)

    def forward(self, x):
        _kernel(self.token, self.token)
        y = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        return 0.5 * torch.tanh(0.5 * y) + 0.5
