"""A candidate with a real indexing bug: its kernel writes out[i * 4096] instead of out[i], far past the
end of the output, so the first forward on a GPU fails with an illegal memory access.

Used to show that a crashing candidate becomes a recorded verdict in `fuseforge suite --candidates`
while the other jobs complete (bench/results/*suite*).
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>

__global__ void chain_kernel(const float* x, const float* y, float* out, long long n,
                             float alpha, float lo, float hi) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float z = x[i] * alpha + y[i];
    z = 0.5f * z * (1.0f + erff(z * 0.70710678118654752f));
    z = fminf(fmaxf(z, lo), hi);
    out[i * 4096] = z + x[i];  // the bug: the stride of a different layout
}

torch::Tensor chain(torch::Tensor x, torch::Tensor y, double alpha, double lo, double hi) {
    auto out = torch::empty_like(x);
    long long n = x.numel();
    int threads = 256;
    long long blocks = (n + threads - 1) / threads;
    chain_kernel<<<blocks, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), n,
                                      (float)alpha, (float)lo, (float)hi);
    return out;
}
"""

CPP = "torch::Tensor chain(torch::Tensor x, torch::Tensor y, double alpha, double lo, double hi);"

ext = load_inline(name="suite_demo_out_of_bounds", cpp_sources=CPP, cuda_sources=CUDA, functions=["chain"])


class ModelNew(nn.Module):
    def __init__(self, alpha, lo, hi):
        super().__init__()
        self.alpha, self.lo, self.hi = alpha, lo, hi

    def forward(self, x, y):
        return ext.chain(x.contiguous(), y.contiguous(), self.alpha, self.lo, self.hi)
