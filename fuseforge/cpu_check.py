"""CPU-side check: run the partitioned plan in float64 on the CPU and compare it with the original model.

Each torch step runs its ATen op; each planned kernel runs its *reference implementation*: the group's
ops evaluated with torch, reading only the kernel's declared inputs and keeping only its declared
outputs. So a kernel that forgot an input, an output used later, a wrong step order or a lost buffer
update shows up here, without a GPU. A row kernel's reference also checks each input against the class
the kernel reads it as (full, per column, per row, scalar), and computes the reduction itself by the
kernel's formulas (`rowwise.reference`: max and sum of exponentials, mean and biased variance, ...)
rather than by the ATen op. A channel kernel's reference does the same for its classes (full, per
channel, scalar) and computes the batch norm's whole result tuple (normalised value, batch mean, inverse
std, new running statistics) by the kernel's formulas (`channelwise.reference`); a channel-reduction kernel's
checks its classes (full, per channel, scalar, per output position) and computes the reduction over axis 1
by `channel_reductions.reference`. A GEMM kernel's reference checks that A and B multiply and each epilogue
input fits its class (full, per row, per column, scalar), then runs the GEMM and its epilogue as the graph's
own ops. The generated C++ itself is checked by the op-table tests.
"""

from __future__ import annotations

import copy
import math
import operator
from dataclasses import dataclass

import torch
from torch import fx

from . import channel_reductions, channelwise, pooling, rowwise
from .capture import Captured
from .load import LoadedModel
from .partition import KernelGroup, KernelStep, Plan
from .partition_rows import broadcasts, per_row_shapes


@dataclass
class CpuCheck:
    passed: bool
    max_rel_error: float  # over outputs and updated buffers
    detail: list[str]


def _materialise(value, env: dict[str, object]):
    if isinstance(value, fx.Node):
        if value.name not in env:
            raise KeyError(f"value {value.name} used before it was computed (or not passed to its kernel)")
        return env[value.name]
    if isinstance(value, (list, tuple)):
        return type(value)(_materialise(v, env) for v in value)
    if isinstance(value, torch.device):
        return torch.device("cpu")
    return value


def _run_node(node: fx.Node, env: dict[str, object]):
    args = _materialise(node.args, env)
    kwargs = {k: _materialise(v, env) for k, v in node.kwargs.items()}
    if kwargs.get("dtype") == torch.float32 and node.target is not torch.tensor:  # factory ops: follow the
        # float64 run (a tensor constant keeps the values the model builds: float32 in both runs)
        kwargs["dtype"] = torch.float64
    return node.target(*args, **kwargs)


def _check_row_operands(group: KernelGroup, inputs: dict[str, object]) -> None:
    """What the row kernel's binding checks: each input fits the class it is read as (broadcast as torch does)."""
    full = [inputs[i] for i, c in group.row.operands if c == "full"]
    if not full:
        raise ValueError(f"{group.name}: no full-shape input")
    sizes = list(full[0].shape)
    red = group.row.reduction
    reduced = red.reduced(len(sizes))
    kept, lead = per_row_shapes(tuple(sizes), reduced)
    for name, cls in group.row.operands:
        t = list(inputs[name].shape)
        padded = [1] * (len(sizes) - len(t)) + t
        if cls == "full":
            ok = t == sizes
        elif cls == "scalar":
            ok = math.prod(t) == 1
        elif cls == "col":
            ok = broadcasts(t, sizes) and all(d == 1 for a, d in enumerate(padded) if a not in reduced)
        else:
            ok = broadcasts(t, kept if cls == "row" else lead)
        if not ok:
            raise ValueError(f"{group.name}: input {name} of shape {t} is not {cls} for rows {red.over} of {sizes}")


def _check_channel_operands(group: KernelGroup, inputs: dict[str, object]) -> None:
    """What the channel kernels' binding checks: each input fits the class it is read as."""
    full = [inputs[i] for i, c in group.channel.operands if c == "full"]
    if not full or full[0].dim() < 2:
        raise ValueError(f"{group.name}: no full-shape input of rank >= 2")
    sizes = full[0].shape
    for name, cls in group.channel.operands:
        t = inputs[name]
        ok = t.shape == sizes if cls == "full" else t.numel() == (sizes[1] if cls == "channel" else 1)
        if ok and cls == "channel" and t.dim() > 1:  # such as [C, 1, 1]: C must land on axis 1
            ok = t.dim() <= len(sizes) and ([1] * (len(sizes) - t.dim()) + list(t.shape))[1] == sizes[1]
        if not ok:
            raise ValueError(f"{group.name}: input {name} of shape {list(t.shape)} is not {cls} for {list(sizes)}")


def _check_gemm_operands(group: KernelGroup, inputs: dict[str, object]) -> None:
    """What the GEMM kernel's binding checks: A and B multiply, each epilogue input fits its class."""
    g = group.gemm.gemm
    a, b = inputs[g.a], inputs[g.b]
    b_kn = b.transpose(-1, -2) if g.op == "linear" else b
    if a.dim() < 2 or b_kn.dim() != (3 if g.batched else 2) or b_kn.shape[-2] != a.shape[-1]:
        raise ValueError(f"{group.name}: GEMM operands {g.a} {list(a.shape)} and {g.b} {list(b.shape)} do not multiply")
    out = [*a.shape[:-1], b_kn.shape[-1]]
    expected = {"row": a.numel() // max(1, a.shape[-1]), "col": out[-1], "scalar": 1}
    for name, cls in group.gemm.operands:
        t = inputs[name]
        if not (list(t.shape) == out if cls == "full" else t.numel() == expected[cls]):
            raise ValueError(f"{group.name}: input {name} of shape {list(t.shape)} is not {cls} for output {out}")


def _check_reduce_operands(group: KernelGroup, inputs: dict[str, object]) -> None:
    """What the channel-reduction kernel's binding checks: each input fits the class it is read as."""
    spec = group.channel_reduce
    full = [inputs[i] for i, c in spec.operands if c in ("full", "pooled")]
    if not full or full[0].dim() < 3:
        raise ValueError(f"{group.name}: no full-shape input of rank >= 3")
    sizes = list(full[0].shape)
    if spec.pool:  # the pooled shape, from the pool's input
        pooled = inputs[spec.pool.data]
        sizes = [*pooled.shape[:2], *[pooling.out_size(spec.pool, a, n) for a, n in enumerate(pooled.shape[2:])]]
    out = sizes if not spec.reduction else [sizes[0], 1, *sizes[2:]] if spec.reduction.keepdim else \
        [sizes[0], *sizes[2:]]
    for name, cls in spec.operands:
        t = inputs[name]
        if cls == "pooled":
            ok = t.dim() == spec.pool.dims + 2
        elif cls in ("full", "reduced"):
            ok = list(t.shape) == (sizes if cls == "full" else out)
        else:
            ok = t.numel() == (sizes[1] if cls == "channel" else 1)
        if ok and cls == "channel" and t.dim() > 1:  # such as [C, 1, 1]: C must land on axis 1
            ok = t.dim() <= len(sizes) and ([1] * (len(sizes) - t.dim()) + list(t.shape))[1] == sizes[1]
        if not ok:
            raise ValueError(f"{group.name}: input {name} of shape {list(t.shape)} is not {cls} for {sizes}")


def run_kernel_reference(group: KernelGroup, by_name: dict[str, fx.Node], inputs: dict[str, object]) -> dict:
    """The kernel's reference implementation: its ops with torch, on its declared inputs only."""
    local = dict(inputs)
    if group.row:
        _check_row_operands(group, inputs)
    if group.channel:
        _check_channel_operands(group, inputs)
    if group.gemm:  # the GEMM and its epilogue are the graph's own ops, in float64
        _check_gemm_operands(group, inputs)
    if group.channel_reduce:
        _check_reduce_operands(group, inputs)
    for name in group.nodes:
        if group.row and name == group.row.anchor:
            red = group.row.reduction
            local[name] = rowwise.reference(red, local[red.data], {p: local[p] for p in red.params if p})
        elif group.channel and name == group.channel.anchor:
            norm = group.channel.norm
            local[name] = channelwise.reference(norm, local[norm.data], {p: local[p] for p in norm.params})
        elif group.channel_reduce and name == group.channel_reduce.pool_node:
            pool = group.channel_reduce.pool
            value = pooling.reference(pool, local[pool.data])
            local[name] = (value, None) if pool.values else value  # with indices: (values, unused indices)
        elif group.channel_reduce and group.channel_reduce.reduction and name == group.channel_reduce.anchor:
            red = group.channel_reduce.reduction
            value = channel_reductions.reference(red, local[red.data])
            local[name] = (value, None) if red.values else value  # min.dim / max.dim: (values, unused indices)
        else:
            local[name] = _run_node(by_name[name], local)
    return {o: local[o] for o in group.outputs}


def run_plan(captured: Captured, plan: Plan, state: dict[str, torch.Tensor], user_inputs: list) -> tuple:
    """Execute the plan; returns (user outputs, {buffer fqn: new value})."""
    by_name = {n.name: n for n in captured.graph.nodes}
    env: dict[str, object] = dict(zip(captured.user_inputs, user_inputs))
    for placeholder, fqn in captured.state_names.items():
        env[placeholder] = state[fqn]
    for step in plan.steps:
        if isinstance(step, KernelStep):
            group = step.group
            env.update(run_kernel_reference(group, by_name, {i: env[i] for i in group.inputs}))
        else:
            node = by_name[step.node]
            env[node.name] = _run_node(node, env) if node.target is not operator.getitem else \
                _materialise(node.args[0], env)[node.args[1]]
    outputs = [env[o] for o in captured.user_outputs]
    buffers = {fqn: env[src] for fqn, src in captured.buffer_mutations.items()}
    return outputs, buffers


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    a, b = a.double(), b.double()
    if torch.isnan(a).any() != torch.isnan(b).any():
        return float("inf")
    diff = (a - b).nan_to_num(0.0)
    return (diff.norm() / b.nan_to_num(0.0).norm().clamp_min(1e-30)).item() if diff.numel() else 0.0


@dataclass
class Float64Reference:
    """The original model run once in float64 on the CPU: what both CPU checks compare against.

    With a symbolic batch size the run uses a batch of 2, which keeps it fast on a CPU.
    """

    state: dict[str, torch.Tensor]  # state_dict before the forward
    inputs: list
    outputs: list[torch.Tensor]
    buffers: dict[str, torch.Tensor]  # buffers after the forward (train-mode updates included)


RANDOM_SEED = 0  # every float64 run starts from it: random ops (dropout, rand_like) draw the same values


def float64_reference(loaded: LoadedModel, captured: Captured) -> Float64Reference:
    model = copy.deepcopy(loaded.model).double()
    inputs = [x[:2] if captured.dynamic_batch else x for x in loaded.inputs]
    inputs = [x.double() if x.is_floating_point() else x for x in inputs]
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    torch.manual_seed(RANDOM_SEED)
    with torch.no_grad():
        out = model(*inputs)
    outputs = list(out) if isinstance(out, (tuple, list)) else [out]
    return Float64Reference(state, inputs, outputs, {k: v.clone() for k, v in model.named_buffers()})


def _compare(what: str, outputs: list, buffers: dict, ref: Float64Reference, tolerance: float) -> CpuCheck:
    detail, worst = [], 0.0
    if len(outputs) != len(ref.outputs):
        detail.append(f"{what} returns {len(outputs)} outputs, the model {len(ref.outputs)}")
        worst = float("inf")
    for i, (got, want) in enumerate(zip(outputs, ref.outputs)):
        err = _rel(got, want)
        worst = max(worst, err)
        detail.append(f"{what} output {i}: shape {list(want.shape)}, relative error {err:.1e}")
    for fqn, value in buffers.items():
        err = _rel(value, ref.buffers[fqn])
        worst = max(worst, err)
        detail.append(f"{what} buffer {fqn}: relative error {err:.1e}")
    return CpuCheck(worst <= tolerance, worst, detail)


def check_on_cpu(captured: Captured, plan: Plan, ref: Float64Reference, tolerance: float = 1e-9) -> CpuCheck:
    """The plan in float64 (kernels by their reference implementations) against the original model."""
    torch.manual_seed(RANDOM_SEED)
    with torch.no_grad():
        outputs, buffers = run_plan(captured, plan, dict(ref.state), ref.inputs)
    return _compare("plan", outputs, buffers, ref, tolerance)


class _ReferenceKernels:
    """Stands in for the compiled extension: each kernel runs its reference implementation."""

    def __init__(self, plan: Plan, by_name: dict[str, fx.Node]):
        self._groups = {g.name: g for g in plan.groups}
        self._by_name = by_name

    def __getattr__(self, name: str):
        if name == "ff_channels_last":  # the layout conversion: the same values in channels-last memory
            return lambda x, _stream: x.contiguous(
                memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
        group = self._groups[name]

        def call(*args):
            *tensors, _stream = args
            assert len(tensors) == len(group.inputs), f"{name}: {len(tensors)} inputs for {group.inputs}"
            out = run_kernel_reference(group, self._by_name, dict(zip(group.inputs, tensors)))
            # every generated kernel writes contiguous outputs, whatever the layout of its inputs (a view
            # of the output after it relies on that)
            values = [out[o].contiguous() if isinstance(out[o], torch.Tensor) else out[o] for o in group.outputs]
            return values[0] if len(values) == 1 else values

        return call


class _NoStream:
    cuda_stream = 0


def check_emitted_on_cpu(loaded: LoadedModel, captured: Captured, plan: Plan, module_path,
                         ref: Float64Reference, tolerance: float = 1e-9) -> CpuCheck:
    """Run the emitted ModelNew.forward in float64 on the CPU, its kernels replaced by their references.

    This checks the Python that emit wrote (step order, freed values, in-place BatchNorm, buffer
    updates, returned outputs) against the original model, without a GPU.
    """
    from .load import import_model_file

    emitted = import_model_file(module_path)
    by_name = {n.name: n for n in captured.graph.nodes}
    emitted._kernels = lambda: _ReferenceKernels(plan, by_name)
    candidate = emitted.ModelNew(*loaded.init_args).double()
    candidate.load_state_dict(ref.state)
    real_stream = torch.cuda.current_stream
    torch.cuda.current_stream = lambda *a, **k: _NoStream()  # the forward asks for a stream to pass on
    torch.manual_seed(RANDOM_SEED)
    try:
        with torch.no_grad():
            got = candidate(*ref.inputs)
    finally:
        torch.cuda.current_stream = real_stream
    outputs = list(got) if isinstance(got, (tuple, list)) else [got]
    return _compare("emitted", outputs, dict(candidate.named_buffers()), ref, tolerance)
