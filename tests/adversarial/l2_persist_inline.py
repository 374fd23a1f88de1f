"""Adversarial (l2_persistence): its kernel launcher pins the weights in a persisting L2 window on the
caller's stream and leaves it set, so timed calls after an L2 flush still hit (never built here: the
static check decides first)."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <cuda_runtime.h>
torch::Tensor pin_weights(torch::Tensor w) {
    cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 32 << 20);
    cudaStreamAttrValue attr = {};
    attr.accessPolicyWindow.base_ptr = w.data_ptr();
    attr.accessPolicyWindow.num_bytes = w.numel() * sizeof(float);
    attr.accessPolicyWindow.hitRatio = 1.0f;
    attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    attr.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    cudaStreamSetAttribute(0, cudaStreamAttributeAccessPolicyWindow, &attr);
    return w;
}
"""

_ext = None


def _kernels():
    global _ext
    if _ext is None:
        _ext = load_inline(name="adv_l2_pin", cpp_sources="torch::Tensor pin_weights(torch::Tensor w);",
                           cuda_sources=SOURCE, functions=["pin_weights"])
    return _ext


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        _kernels().pin_weights(self.linear.weight)
        y = x @ self.linear.weight.t() + self.linear.bias
        return 1.0 / (1.0 + y.neg().exp())
