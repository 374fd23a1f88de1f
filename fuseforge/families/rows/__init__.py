"""Row kernels: a reduction or normalisation over the trailing axes (or softmax over the channel axis) with the
pointwise ops around it, as one kernel."""

from __future__ import annotations

from ...partition_rows import form_row_groups


class Rows:
    name = "rows"
    switch = "row_kernels"
    notes_stand = False

    def claim(self, graph, pointwise_groups, not_fused, reach, claimed):
        return form_row_groups(graph, pointwise_groups, not_fused, reach)


FAMILY = Rows()
