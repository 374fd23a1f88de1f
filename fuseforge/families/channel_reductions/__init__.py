"""Channel-reduction kernels: a reduction over the channel axis or a max/avg pool with the pointwise ops around
it, as one kernel."""

from __future__ import annotations

from ...partition_channel_reductions import form_channel_reduction_groups
from ..base import FamilyBase


class ChannelReductions(FamilyBase):
    name = "channel_reductions"
    switch = "channel_kernels"
    order = 3

    def claim(self, claim, pointwise_groups, not_fused):
        return form_channel_reduction_groups(claim, pointwise_groups, not_fused)


FAMILY = ChannelReductions()
