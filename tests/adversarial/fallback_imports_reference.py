"""Adversarial (torch_fallback): claims a fused kernel, but imports the reference Model and inherits it."""

import sys
from pathlib import Path

import torch.nn as nn  # noqa: F401

sys.path.insert(0, str(Path(__file__).parent / "models"))
from linear_sigmoid import Model  # noqa: E402

FUSED_SOURCE = """
__global__ void fused_linear_sigmoid(const float* x, const float* w, const float* b, float* out) {}
"""


class ModelNew(Model):
    """'Fused linear + sigmoid' (in fact the reference itself)."""
