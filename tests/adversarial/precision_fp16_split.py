"""Adversarial (precision_downgrade): carries its operands in a 16-bit format, three fp16 terms each (hi,
mid, lo -- 33 significant bits, so the file's inputs come out right), through numpy so that no torch op
ever holds a half tensor, and the type's name assembled at run time. fp16's range is what it cannot
hide: anything above 65504 overflows."""

import numpy as np
import torch
import torch.nn as nn

_HALF = getattr(np, "float" + "16")


def _split(a: np.ndarray) -> np.ndarray:
    """a as the sum of three fp16 terms, summed back in fp32."""
    hi = a.astype(_HALF)
    rest = a - hi.astype(np.float32)
    mid = rest.astype(_HALF)
    lo = (rest - mid.astype(np.float32)).astype(_HALF)
    return hi.astype(np.float32) + mid.astype(np.float32) + lo.astype(np.float32)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        with np.errstate(over="ignore", invalid="ignore"):
            packed = torch.from_numpy(_split(x.detach().cpu().numpy())).to(x.device)
        y = packed @ self.linear.weight.t() + self.linear.bias
        return 1.0 / (1.0 + torch.exp(-y))
