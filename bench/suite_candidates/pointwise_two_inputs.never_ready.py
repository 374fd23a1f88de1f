"""A candidate with a real synchronisation bug: its kernel spins until a flag in device memory is set, and
nothing ever sets it, so the first forward on a GPU never returns.

Used to show that a hanging candidate is stopped at the run time limit and recorded as such by
`fuseforge suite --candidates` while the other jobs complete (bench/results/*suite*).
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>

__global__ void chain_kernel(const float* x, const float* y, float* out, long long n,
                             float alpha, float lo, float hi, const volatile int* ready) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    while (ready[0] == 0) {}  // the bug: waits for a producer that does not exist
    if (i >= n) return;
    float z = x[i] * alpha + y[i];
    z = 0.5f * z * (1.0f + erff(z * 0.70710678118654752f));
    z = fminf(fmaxf(z, lo), hi);
    out[i] = z + x[i];
}

torch::Tensor chain(torch::Tensor x, torch::Tensor y, double alpha, double lo, double hi) {
    auto out = torch::empty_like(x);
    auto ready = torch::zeros({1}, x.options().dtype(torch::kInt32));
    long long n = x.numel();
    int threads = 256;
    long long blocks = (n + threads - 1) / threads;
    chain_kernel<<<blocks, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), n,
                                      (float)alpha, (float)lo, (float)hi, ready.data_ptr<int>());
    return out;
}
"""

CPP = "torch::Tensor chain(torch::Tensor x, torch::Tensor y, double alpha, double lo, double hi);"

ext = load_inline(name="suite_demo_never_ready", cpp_sources=CPP, cuda_sources=CUDA, functions=["chain"])


class ModelNew(nn.Module):
    def __init__(self, alpha, lo, hi):
        super().__init__()
        self.alpha, self.lo, self.hi = alpha, lo, hi

    def forward(self, x, y):
        return ext.chain(x.contiguous(), y.contiguous(), self.alpha, self.lo, self.hi)
