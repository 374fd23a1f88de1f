import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear, 1-D average pool over the features, GELU, scale, max over the features."""

    def __init__(self, in_features, out_features, pool_kernel_size, scale_factor):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.avg_pool = nn.AvgPool1d(kernel_size=pool_kernel_size)
        self.scale_factor = scale_factor

    def forward(self, x):
        x = self.matmul(x)
        x = self.avg_pool(x.unsqueeze(1)).squeeze(1)
        x = torch.nn.functional.gelu(x)
        x = x * self.scale_factor
        return torch.max(x, dim=1).values


def get_inputs():
    return [torch.randn(1024, 8192)]


def get_init_inputs():
    return [8192, 8192, 16, 2.0]
