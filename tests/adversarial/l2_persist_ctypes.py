"""Adversarial (l2_persistence, CUDA): reserves persisting L2 through the CUDA runtime (ctypes, names
assembled at run time) on every call and never gives it back."""

import ctypes

import torch
import torch.nn as nn


def _cudart():
    torch.zeros(1, device="cuda")  # torch's runtime is loaded, so it is in the process's memory map
    mapped = [line.split()[-1] for line in open("/proc/self/maps") if "libcudart" in line]
    return ctypes.CDLL(mapped[0] if mapped else "libcudart.so")


_runtime = _cudart()
_reserve = getattr(_runtime, "cudaDevice" + "SetLimit")


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        _reserve(0x06, ctypes.c_size_t(16 << 20))  # cudaLimitPersistingL2CacheSize
        y = x @ self.linear.weight.t() + self.linear.bias
        return 1.0 / (1.0 + torch.exp(-y))
