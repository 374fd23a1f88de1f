"""Stage `rewrite`: algebraic identities applied to the captured graph, to a fixpoint.

Each rule (see `engine`) is a pattern, named guards and a build whose docstring's first line is the
identity; its scope says whether it holds for all inputs and parameters or only under a condition.
The order of `RULES` is the order of application within a round; rounds repeat until none fires:

1. identities: size-1 reductions, range-keeping activations, views that cancel, copies of values nothing
   else reads, detaches, common subexpressions (cleanups first: they expose the patterns below); and views: a
   reshape of trailing axes moves after the pointwise ops that read it (they then join the kernel before it), and
   an explicit expand before a pointwise op that broadcasts to that shape anyway is dropped;
2. scalar folding: scalars move out of reductions, onto the smaller tensor;
3. linear maps: reductions fold into the weight of the linear map before them, a global average
   pool of a convolution or a spatial mean of a transposed one becomes a small linear map; then global pools: any other adaptive pool to size 1
   becomes the mean or amax over its spatial axes (a reduction, which the rules of the next round and
   the row kernels take); and two linear maps compose where cheaper (after the reductions, so that a
   reduced map composes at its reduced size);
4. channel shifts: a convolution's bias becomes a per-channel add (last: the linear-map rules above read
   the bias in place), and a per-channel add moves after a max pool or a mean along other axes, into the
   kernel that reads the smaller result.

Every firing is logged with the FLOPs and bytes it removes at the traced sizes.
"""

from __future__ import annotations

from torch import fx

from .channel_shifts import conv_bias_as_channel_add, max_pool_of_channel_shift, mean_of_channel_shift
from .conv_pool import global_average_pool_of_conv, spatial_mean_of_conv, spatial_mean_of_conv_transpose
from .engine import ALL, Firing, RewriteContext, RewriteLog, Rule, declined_by, run_rules
from .global_pools import global_average_pool_is_a_mean, global_max_pool_is_an_amax
from .identities import (
    clamp_within_range,
    common_subexpression,
    copy_of_a_fresh_value,
    detach_of_a_value,
    reduction_over_size_one_axes,
    views_that_cancel,
)
from .linear_maps import compose_linear_maps, reduce_the_weight_not_the_output
from .scalars import scalar_out_of_reduction
from .views import pointwise_of_a_reshape, pointwise_of_an_expand

RULES: list[Rule] = [
    reduction_over_size_one_axes,
    clamp_within_range,
    views_that_cancel,
    copy_of_a_fresh_value,
    detach_of_a_value,
    common_subexpression,
    pointwise_of_a_reshape,
    pointwise_of_an_expand,
    scalar_out_of_reduction,
    reduce_the_weight_not_the_output,
    global_average_pool_of_conv,
    spatial_mean_of_conv,
    spatial_mean_of_conv_transpose,
    global_average_pool_is_a_mean,
    global_max_pool_is_an_amax,
    compose_linear_maps,
    conv_bias_as_channel_add,
    max_pool_of_channel_shift,
    mean_of_channel_shift,
]

__all__ = ["ALL", "RULES", "Firing", "RewriteContext", "RewriteLog", "Rule", "declined_by", "format_rewrite",
           "rewrite"]


def rewrite(graph: fx.Graph, context=None, *, rules: list[Rule] | None = None, max_rounds: int = 50) -> RewriteLog:
    """Rewrite `graph` in place. `context`: the `Captured` (or a `RewriteContext`) that says which
    placeholders are parameters and buffers; without it, rules that need a parameter do not fire."""
    return run_rules(graph, RULES if rules is None else rules, RewriteContext.of(context), max_rounds)


def _amount(flops: float, moved: int) -> str:
    return f"{flops / 1e9:.3g} GFLOP and {moved / 1e6:.3g} MB of memory traffic"


def format_rewrite(log: RewriteLog, captured_text: str) -> str:
    """The `10_rewritten.txt` artefact: what fired (identity, scope, work removed), then the graph."""
    head = []
    for f in log.firings:
        head.append(f"# {f.rule} at {f.node}: {f.identity}")
        head.append(f"#     holds for {f.scope}; removes {_amount(f.flops_removed, f.bytes_removed)} per forward")
    if not log.firings:
        head.append("# no rewrite rule fired")
    else:
        total_flops = sum(f.flops_removed for f in log.firings)
        total_bytes = sum(f.bytes_removed for f in log.firings)
        head.append(f"# in all: removes {_amount(total_flops, total_bytes)} per forward (traced sizes)")
    head.append(f"# dead ops removed: {log.dead_removed}")
    return "\n".join(head) + "\n" + captured_text
