"""Channel-norm kernels: a train-mode batch norm or a group norm with the pointwise ops around it, as a pair of
kernels (statistics, then normalise)."""

from __future__ import annotations

from ...partition_channels import form_channel_groups


class ChannelNorms:
    name = "channel_norms"
    switch = "channel_kernels"
    notes_stand = False

    def claim(self, graph, pointwise_groups, not_fused, reach, claimed):
        return form_channel_groups(graph, pointwise_groups, not_fused, reach, claimed)


FAMILY = ChannelNorms()
