"""GEMM kernels: a float32 GEMM with the pointwise chain after it as one 3xTF32 tensor-core kernel."""

from __future__ import annotations

from ...partition_gemm import form_gemm_groups
from ..base import FamilyBase


class Gemm(FamilyBase):
    name = "gemm"
    switch = "gemm_kernels"
    order = 2
    notes_stand = True  # it claims first; later families do not restate the edges of its groups

    def claim(self, claim, pointwise_groups, not_fused):
        return form_gemm_groups(claim, pointwise_groups, not_fused)


FAMILY = Gemm()
