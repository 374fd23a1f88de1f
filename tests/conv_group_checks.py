"""Checks the conv kernels' tests share: a plan's conv groups against the graph's own ops in float64 (CPU), and the
generated conv kernels against float64 on a GPU, held to eager's own error on the same values."""

import torch

from fuseforge.evaluate.cpu_check import _run_node, run_kernel_reference

# A model file whose 3 -> 8 channel convolution of an 8 x 8 image with relu the cost model leaves to cuDNN (the
# direct kernel's launch and tails cost more than it saves at this size): for what `--every-kernel` changes.
SMALL_CONV = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)

    def forward(self, x):
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(2, 3, 8, 8)]


def get_init_inputs():
    return []
"""


def shape_of(node):
    """The node's traced shape, a symbolic size taken as 2."""
    return [s if isinstance(s, int) else 2 for s in node.meta["val"].shape]


def assert_conv_groups_match_the_graph_in_float64(captured, plan):
    """Each conv group's float64 reference (the plan's geometry) equals the graph's ops on random float64 inputs."""
    by_name = {n.name: n for n in captured.graph.nodes}
    torch.manual_seed(1)
    for group in [g for g in plan.groups if g.kind == "conv"]:
        inputs = {i: torch.randn(tuple(shape_of(by_name[i])), dtype=torch.float64) for i in group.inputs}
        got = run_kernel_reference(group, by_name, inputs)
        local = dict(inputs)
        for name in group.nodes:
            local[name] = _run_node(by_name[name], local)
        for out in group.outputs:
            torch.testing.assert_close(got[out], local[out], rtol=1e-10, atol=1e-10)


TF32_OPERANDS_TOL = 1e-4  # the tensor-core kernel vs float64 of its TF32-rounded operands: fp32 accumulation only


def _rel(value, truth):
    return ((value.double().cpu() - truth).abs().max() / truth.pow(2).mean().sqrt().clamp_min(1e-30)).item()


def run_cuda(node, values):
    """The node's op on the values computed so far, where they are (`_run_node` runs it on the CPU)."""
    args = [values[a.name] if isinstance(a, torch.fx.Node) else a for a in node.args]
    return node.target(*args, **node.kwargs)


def _graph_values(captured, user_inputs: dict):
    """Every value of the graph in float32 on the GPU: `user_inputs`, random parameters and buffers of their traced
    shapes, then each op in order."""
    values = {name: t.cuda() for name, t in user_inputs.items()}
    for node in captured.graph.nodes:
        if node.op == "placeholder" and node.name not in values:
            values[node.name] = torch.randn(tuple(shape_of(node)), device="cuda")
        elif node.op == "call_function":
            values[node.name] = run_cuda(node, values)
    return values


def tf32(t):
    """t rounded to TF32 (nearest, ties away), as the tensor-core conv kernel's operands are."""
    return ((t.float().contiguous().view(torch.int32) + 0x1000) & -0x2000).view(torch.float32).to(t.dtype)


def conv_kernel_failures(captured, plan, ext, inputs_of_batch, batches=(1, 3), tf32_operands=False) -> list[str]:
    """Builds `ext` and runs each conv group's kernel at each batch (`inputs_of_batch(batch)`: the user inputs by
    name); a failure is an output of another shape than float64's, or an error vs float64 above twice eager's on
    the same values (plus 1e-6). Eager runs with the process's precision flags. With `tf32_operands` (the
    tensor-core kernel) float64 gets the convolution's input and weight rounded to TF32, as the kernel reads
    them, and the bound is TF32_OPERANDS_TOL instead: what is left is the kernel's fp32 accumulation, so any
    indexing error shows, whichever precision cuDNN picked for eager on these small shapes."""
    from torch.utils.cpp_extension import load_inline

    kernels = load_inline(name=ext.name, cpp_sources=[ext.binding], cuda_sources=[ext.cuda],
                          functions=list(ext.functions), extra_cflags=list(ext.cflags),
                          extra_cuda_cflags=list(ext.nvcc_flags), no_implicit_headers=True)
    by_name = {n.name: n for n in captured.graph.nodes}
    stream = torch.cuda.current_stream().cuda_stream
    failures = []
    for batch in batches:
        torch.manual_seed(batch)
        values = _graph_values(captured, inputs_of_batch(batch))
        for group in [g for g in plan.groups if g.kind == "conv"]:
            inputs = {i: values[i] for i in group.inputs}
            got = getattr(kernels, group.name)(*[inputs[i] for i in group.inputs], stream)
            got = got if isinstance(got, (list, tuple)) else [got]
            reference_inputs = {i: v.double().cpu() for i, v in inputs.items()}
            if tf32_operands:
                c = group.spec.conv
                for name in (c.x, c.w):
                    reference_inputs[name] = tf32(reference_inputs[name])
            truth = run_kernel_reference(group, by_name, reference_inputs)
            eager = dict(inputs)
            for name in group.nodes:
                eager[name] = run_cuda(by_name[name], eager)
            for out, value in zip(group.outputs, got):
                ours, theirs = _rel(value, truth[out]), _rel(eager[out], truth[out])
                bound = TF32_OPERANDS_TOL if tf32_operands else 2 * theirs + 1e-6
                if tuple(value.shape) != tuple(truth[out].shape) or not ours <= bound:
                    failures.append(f"{group.name} batch {batch} {out}: error {ours:.2e} (bound {bound:.1e}), eager "
                                    f"{theirs:.2e}")
    return failures
