"""Plan step `layout`: which convolutions run channels-last (NHWC) in the emitted ModelNew.

On the H100 (torch 2.11, cuDNN 9.19) PyTorch's fp32 convolutions run as cuDNN NHWC kernels: given NCHW
tensors, cuDNN converts the input and the weight to NHWC and its output back to NCHW, three extra passes
(measured with dev/kernels/profile_kernels.py: conv2d_channelmin_tanh's convolution 0.79 ms, its
conversions 0.86 ms back and 0.22 ms in). A convolution whose input and weight are channels-last returns
a channels-last output, with no conversion back. That pays when every reader of the output reads
channels-last directly: a channel-reduction kernel (a reduction over the channels, with an optional pool
first), a batch-norm or group-norm kernel pair, or a pointwise kernel, whose bindings take a channels-last
input as it is (the pointwise kernel reads it through a shared-memory tile transpose and writes NCHW).

The values are the same in both layouts; only the memory order differs, and every kernel's binding checks
the layout it is given (a contiguous tensor is always accepted), so the choice affects speed, not results.
"""

from __future__ import annotations

from torch import fx

from .plan import Plan, TorchStep

CONVS = ("aten.conv2d.default", "aten.conv3d.default", "aten.conv_transpose2d.input",
         "aten.conv_transpose3d.input")


def _reads_channels_last(group, value: str, by_name: dict[str, fx.Node]) -> bool:
    """A kernel group that takes `value` channels-last: a kernel family's kernel that says so
    (`Family.reads_channels_last`: a channel-reduction kernel that reads it as its one full input or as its
    pool's input, a batch-norm or group-norm kernel whose one full-shape input it is); a pointwise kernel over
    `value`'s shape whose other inputs are no convolutions (they stay contiguous), which reads it through a
    tile transpose."""
    if group.kind == "pointwise":
        shape = by_name[value].meta["val"].shape
        others = [by_name[i] for i in group.inputs if i != value]
        return (all(by_name[o].meta["val"].shape == shape for o in group.outputs)
                and not any(str(o.target) in CONVS for o in others))
    return group.family is not None and group.family.reads_channels_last(group, value, by_name)


def channels_last_convs(plan: Plan, graph: fx.Graph) -> frozenset[str]:
    """Convolutions (torch steps, 4-D or 5-D) whose every reader is a kernel that reads channels-last."""
    by_name = {n.name: n for n in graph.nodes}
    group_of = {member: g for g in plan.groups for member in g.nodes}
    chosen = set()
    for step in plan.steps:
        node = by_name[step.node] if isinstance(step, TorchStep) else None
        if node is None or str(node.target) not in CONVS or node.meta["val"].dim() not in (4, 5):
            continue
        readers = [group_of.get(u.name) for u in node.users]  # None: a torch step or the model's output
        if readers and all(g is not None and _reads_channels_last(g, node.name, by_name) for g in readers):
            chosen.add(node.name)
    return frozenset(chosen)
