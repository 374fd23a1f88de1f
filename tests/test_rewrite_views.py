"""Rewrite family `views`: a reshape of trailing axes moves after the pointwise ops that read it."""

import torch
from test_rewrite_support import assert_does_not_fire, assert_float64_equal, fired, rewritten
from torch import nn

from fuseforge.families import FAMILIES
from fuseforge.partition import partition
from fuseforge.rewrite.views import pointwise_of_a_reshape


class SpatialSoftmax(nn.Module):
    """A softmax over the flattened spatial axes, reshaped back, times a per-channel scale, plus a number."""

    def __init__(self, c=3):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(1, c, 1, 1, 1))

    def forward(self, x):
        b, c, d, h, w = x.shape
        y = torch.softmax(torch.clamp(x, 0.0, 1.0).view(b, c, -1), dim=2)
        return torch.tanh(y.view(b, c, d, h, w) * self.scale + 0.5)


X5 = torch.randn(2, 3, 4, 5, 6)


def test_the_ops_after_a_spatial_softmax_move_before_the_reshape_and_join_its_row_kernel():
    c, log = rewritten(SpatialSoftmax(), X5)
    assert fired(log) == ["pointwise_of_a_reshape"] * 3  # the multiply, the add, the tanh, one at a time
    c.graph.lint()
    plan = partition(c.graph, FAMILIES)
    (row,) = [g for g in plan.groups if g.kind == "rows"]
    assert [n.split("_")[0] for n in row.nodes] == ["softmax", "mul", "add", "tanh"]
    assert dict(row.spec.operands)[next(i for i in row.inputs if i.startswith("view"))] in ("full", "row")
    assert str(list(c.graph.nodes)[-2].target) == "aten.view.default"  # the reshape back comes last
    assert_float64_equal(SpatialSoftmax(), c, [X5], seed=3, batch=3, scale=1.5)


def test_a_flatten_before_a_linear_layer_moves_after_the_activation():
    class Flatten(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3 * 4 * 4, 5)

        def forward(self, x):
            return self.fc(torch.relu(x.view(x.shape[0], -1)))

    x = torch.randn(2, 3, 4, 4)
    c, log = rewritten(Flatten(), x)
    assert fired(log) == ["pointwise_of_a_reshape"]
    relu = next(n for n in c.graph.nodes if "relu" in str(n.target))
    assert relu.meta["val"].dim() == 4  # the activation runs on the 4-D value
    assert_float64_equal(Flatten(), c, [x], seed=4, batch=3, scale=2.0)


def test_an_operand_that_varies_along_the_reshaped_axes_keeps_the_reshape_in_place():
    class Varies(nn.Module):
        def __init__(self):
            super().__init__()
            self.plane = nn.Parameter(torch.randn(1, 3, 20))

        def forward(self, x):
            return x.view(x.shape[0], 3, -1) * self.plane

    assert_does_not_fire(Varies(), torch.randn(2, 3, 4, 5), rule=pointwise_of_a_reshape, at="mul_2",
                         because="a pointwise op reads a reshape of a value computed from the inputs that regroups "
                                 "only trailing axes (read by nothing else), and reads its other tensors constant along "
                                 "those axes")


def test_a_reshape_read_twice_stays_in_place():
    class Twice(nn.Module):
        def forward(self, x):
            y = x.view(x.shape[0], -1)
            return torch.relu(y), y.sum(dim=1)

    c, log = rewritten(Twice(), torch.randn(2, 3, 4))
    assert "pointwise_of_a_reshape" not in fired(log)


class NormalizeByHand(nn.Module):
    """x / ||x|| expanded by hand (as F.normalize spells it), and a scale expanded against a smaller tensor."""

    def forward(self, x, y):
        n = torch.linalg.vector_norm(x, 2, -1, keepdim=True).clamp_min(1e-6)
        s = x.amax(dim=-1, keepdim=True)
        return x / n.expand_as(x), s.expand(x.shape[0], 7) * y, torch.relu(x.amin(-1, keepdim=True).expand_as(x))


def test_an_expand_read_by_a_pointwise_op_with_a_full_operand_is_the_ops_own_broadcast():
    """Catches the rule firing where no other operand has the full shape (the op's result would shrink) and the
    expanded value's numbers changing."""
    x, y = torch.randn(3, 7), torch.randn(1, 7)
    c, log = rewritten(NormalizeByHand(), x, y)
    assert fired(log) == ["pointwise_of_an_expand"]  # the division only: y is [1, 7], relu reads nothing else
    div = next(n for n in c.graph.nodes if "div" in str(n.target))
    assert not any("expand" in str(a.target) for a in div.all_input_nodes)
    assert sum("expand" in str(n.target) for n in c.graph.nodes) == 2  # the other two stay
    assert_float64_equal(NormalizeByHand(), c, [x, y], seed=5, batch=4, scale=1.5)
    plan = partition(c.graph, FAMILIES)
    (row,) = [g for g in plan.groups if g.kind == "rows" and g.spec.reduction.op == "l2_norm"]
    assert any("div" in n for n in row.nodes)  # the division joined the norm's row kernel
