"""Channel-reduction kernels: a reduction over the channel axis or a max/avg pool with the pointwise ops around
it, as one kernel."""

from __future__ import annotations

from ...partition_channel_reductions import form_channel_reduction_groups


class ChannelReductions:
    name = "channel_reductions"
    switch = "channel_kernels"
    notes_stand = False

    def claim(self, graph, pointwise_groups, not_fused, reach, claimed):
        return form_channel_reduction_groups(graph, pointwise_groups, not_fused, reach, claimed)


FAMILY = ChannelReductions()
