"""GEMM kernels: a float32 GEMM with the pointwise chain after it as one 3xTF32 tensor-core kernel."""

from __future__ import annotations

from ...partition_gemm import form_gemm_groups


class Gemm:
    name = "gemm"
    switch = "gemm_kernels"
    notes_stand = True  # it claims first; later families do not restate the edges of its groups

    def claim(self, graph, pointwise_groups, not_fused, reach, claimed):
        return form_gemm_groups(graph, pointwise_groups, not_fused, reach)


FAMILY = Gemm()
