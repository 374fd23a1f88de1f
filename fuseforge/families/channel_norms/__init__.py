"""Channel-norm kernels: a train-mode batch norm or a group norm with the pointwise ops around it, as a pair of
kernels (statistics, then normalise)."""

from __future__ import annotations

from ...partition_channels import form_channel_groups
from ..base import FamilyBase


class ChannelNorms(FamilyBase):
    name = "channel_norms"
    switch = "channel_kernels"
    order = 1

    def claim(self, claim, pointwise_groups, not_fused):
        return form_channel_groups(claim, pointwise_groups, not_fused)


FAMILY = ChannelNorms()
