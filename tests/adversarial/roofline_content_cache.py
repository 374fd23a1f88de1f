"""Adversarial (roofline, CUDA): memoises outputs keyed by a cheap digest of the input's content and
returns copies. Every output is right (for repeated input content) and never aliased; but a repeated
input costs a copy instead of a GEMM -- faster than the GEMM's roofline floor allows."""

import torch
import torch.nn as nn

_MEMO = {}


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        probe = torch.stack([x[0, :64].sum(), x[-1, -64:].sum(), x[x.shape[0] // 2, :64].sum()])
        digest = (x.shape[0], *probe.tolist())  # one small copy to the host
        hit = _MEMO.get(digest)
        if hit is None:
            hit = torch.clamp_min(x @ self.linear.weight.t() + self.linear.bias, 0.0)
            _MEMO[digest] = hit
        return hit.clone()
