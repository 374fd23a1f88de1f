"""Partition v0: pointwise chains between anchors become one kernel each; the reasons are recorded."""

import types

import pytest
import torch
from torch import nn

from fuseforge.capture import ALIASES, capture
from fuseforge.load import LoadedModel
from fuseforge.partition import partition
from fuseforge.plan import KernelStep, TorchStep


def _captured(model: nn.Module, *inputs):
    loaded = LoadedModel(path=types.SimpleNamespace(name="t.py", stem="t"), source="", module=None,
                         model=model, init_args=[], inputs=list(inputs), outputs=[], output_is_tuple=False)
    return capture(loaded)


def _kernels(plan):
    return [[n.split("_")[0] for n in g.nodes] for g in plan.groups]


class LinearEpilogue(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 16)

    def forward(self, x):
        y = self.fc(x)
        return torch.sigmoid(y) * 2.0 + y


def test_an_anchor_epilogue_with_a_residual_becomes_one_kernel_reading_the_anchor_output():
    plan = partition(_captured(LinearEpilogue(), torch.randn(4, 8)).graph)
    assert _kernels(plan) == [["sigmoid", "mul", "add"]]
    (group,) = plan.groups
    assert group.inputs == ("linear",)
    assert [type(s) for s in plan.steps] == [TorchStep, KernelStep]
    assert any(w.producer == "linear" and "not pointwise" in w.reason for w in plan.not_fused)


class TwoInputs(nn.Module):
    def forward(self, x, y):
        z = torch.nn.functional.gelu(x * 1.5 + y)
        return torch.clamp(z, -0.5, 2.0) + x


def test_a_multi_input_chain_with_scalars_is_one_kernel_with_both_inputs():
    plan = partition(_captured(TwoInputs(), torch.randn(4, 8), torch.randn(4, 8)).graph)
    assert len(plan.groups) == 1
    assert set(plan.groups[0].inputs) == {"x", "y"}
    assert len(plan.groups[0].nodes) == 5


class ColumnNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(8))

    def forward(self, x):
        rms = torch.rsqrt(x.pow(2).mean(dim=0, keepdim=True) + 1e-6)  # over the first axis: no row kernel
        return x + x * rms * self.weight


def test_a_reduction_splits_the_chain_and_a_column_statistic_is_broadcast_inside_the_kernel():
    plan = partition(_captured(ColumnNorm(), torch.randn(4, 8)).graph)
    assert _kernels(plan) == [["pow"], ["add", "rsqrt", "mul", "mul", "add"]]
    assert all(g.kind != "rows" for g in plan.groups)
    second = plan.groups[1]
    assert set(second.inputs) == {"mean", "x", "p_weight"}
    assert list(second.shape)[1:] == [8]


class SharedIntermediate(nn.Module):
    def forward(self, x):
        a = torch.tanh(x)
        s = a.sum(dim=0, keepdim=True)  # uses `a` outside the chain (not over the last axis: a torch call)
        return a * 2.0, s


def test_a_value_also_needed_by_an_anchor_is_written_as_a_kernel_output():
    plan = partition(_captured(SharedIntermediate(), torch.randn(4, 8)).graph)
    (group,) = plan.groups
    assert set(group.outputs) == {group.nodes[0], group.nodes[-1]}


class DifferentShapes(nn.Module):
    def forward(self, x):
        m = x.mean(dim=0, keepdim=True)
        e = torch.exp(m)  # [1, 8], needed as an output of its own
        return e, x * e


def test_outputs_of_different_shapes_are_never_one_kernel_and_the_reason_says_so():
    plan = partition(_captured(DifferentShapes(), torch.randn(4, 8)).graph)
    assert len(plan.groups) == 2
    assert any("different shapes" in w.reason for w in plan.not_fused)


class NonConvex(nn.Module):
    def forward(self, x):
        a = torch.relu(x)
        b = a.softmax(dim=0)  # anchor between two pointwise ops that both depend on `a` (not a row kernel)
        return a + b


def test_two_pointwise_ops_around_an_anchor_are_not_fused_into_a_cycle():
    plan = partition(_captured(NonConvex(), torch.randn(4, 8)).graph)
    order = [s.group.name if isinstance(s, KernelStep) else s.node for s in plan.steps]
    assert len(plan.groups) == 2
    assert order.index("softmax") < order.index(plan.groups[1].name)
    assert any("cycle" in w.reason for w in plan.not_fused)


class IntegerOps(nn.Module):
    def forward(self, x):
        return x.argmax(dim=1) + 1


def test_ops_on_integer_tensors_stay_torch_calls():
    plan = partition(_captured(IntegerOps(), torch.randn(4, 8)).graph)
    assert plan.groups == []



class MaskAsIndex(nn.Module):
    def forward(self, x):
        x = torch.tanh(x) * 2.0
        x[x > 1.5] = 1.5  # the mask is an index of a torch op
        return torch.where(x > 0.5, x, -x)  # this mask stays inside a kernel


def _float32_boundaries(plan, graph) -> list[str]:
    meta = {n.name: n.meta.get("val") for n in graph.nodes}
    names = [v for g in plan.groups for v in g.inputs + g.outputs]
    return [v for v in names if getattr(meta[v], "dtype", torch.float32) != torch.float32]


def test_a_mask_a_torch_op_reads_stays_a_torch_call_and_kernels_read_and_write_float32_only():
    """Catches a kernel writing a bool mask as float32 for `x[x > c] = c` (index_put: "tensors used as indices must
    be long, int, byte or bool tensors", seen on the GPU), or reading one from memory as float32."""
    captured = _captured(MaskAsIndex(), torch.randn(4, 8))
    plan = partition(captured.graph)
    assert _float32_boundaries(plan, captured.graph) == []
    in_kernels = {n for g in plan.groups for n in g.nodes}
    (index_put,) = [n for n in captured.graph.nodes if n.target is torch.ops.aten.index_put.default]
    (mask,) = [a.name for a in index_put.args[1]]
    assert mask not in in_kernels
    assert any(w.producer == mask and "kernels write float32" in w.reason for w in plan.not_fused)
    assert any(n.startswith("tanh") for n in in_kernels) and any(n.startswith("where") for n in in_kernels)


def test_the_cpu_check_runs_a_kernel_as_it_reads_and_writes_float32_only():
    """Catches what the GPU found first: the CPU float64 check ran a mask kernel's output as bool, where the kernel
    writes float32 values, so a plan that made a mask of an index passed on the CPU and failed on the GPU."""
    from fuseforge.evaluate.cpu_check import run_kernel_reference
    from fuseforge.plan import KernelGroup

    captured = _captured(MaskAsIndex(), torch.randn(4, 8))
    by_name = {n.name: n for n in captured.graph.nodes}
    (index_put,) = [n for n in captured.graph.nodes if n.target is torch.ops.aten.index_put.default]
    mask = index_put.args[1][0]
    (source,) = mask.all_input_nodes
    as_a_kernel = KernelGroup("fused_gt", (mask.name,), (source.name,), (mask.name,), (4, 8))
    written = run_kernel_reference(as_a_kernel, by_name, {source.name: torch.randn(4, 8, dtype=torch.float64)})
    assert written[mask.name].dtype == torch.float64
    reading = KernelGroup("fused_where", (mask.name,), (source.name,), (mask.name,), (4, 8))
    with pytest.raises(RuntimeError, match="inputs must be float32, got torch.bool"):
        run_kernel_reference(reading, by_name, {source.name: torch.ones(4, 8, dtype=torch.bool)})


class Aliases(nn.Module):
    def forward(self, x, y):
        z = torch.multiply(torch.subtract(x, y), 2.0)
        out = torch.clip(torch.divide(z, torch.absolute(y) + 1.0), -1.0, 1.0)
        return torch.where(torch.greater(x, y), out, torch.negative(out))


def test_aten_aliases_are_captured_as_the_ops_they_name_and_fuse_like_them():
    captured = _captured(Aliases(), torch.randn(4, 8), torch.randn(4, 8))
    targets = {str(n.target) for n in captured.graph.nodes if n.op == "call_function"}
    assert {"aten.mul.Tensor", "aten.sub.Tensor", "aten.clamp.default", "aten.div.Tensor", "aten.abs.default",
            "aten.gt.Tensor", "aten.neg.default"} <= targets
    assert not any(t.removeprefix("aten.") in ALIASES for t in targets)
    plan = partition(captured.graph)
    (group,) = plan.groups
    assert group.kind == "pointwise" and len(group.nodes) == len(targets)


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_each_alias_has_the_schema_of_the_op_it_names(alias):
    def schema(name):
        op, overload = name.split(".")
        return [(a.name, str(a.type)) for a in getattr(getattr(torch.ops.aten, op), overload)._schema.arguments]

    assert schema(alias) == schema(ALIASES[alias])
