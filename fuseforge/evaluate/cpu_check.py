"""CPU-side check: run the partitioned plan in float64 on the CPU and compare it with the original model.

Each torch step runs its ATen op; each planned kernel runs its *reference implementation*: the group's
ops evaluated with torch, reading only the kernel's declared inputs and keeping only its declared
outputs. So a kernel that forgot an input, an output used later, a wrong step order or a lost buffer
update shows up here, without a GPU. A kernel family's kernel also checks each input against the class
the kernel reads it as (`Family.check_operands`: full, per row, per column, per channel, scalar, ...) and
computes its anchor by the kernel's own formulas (`Family.references`: a row kernel's max and sum of
exponentials, a norm's mean and biased variance, ...) rather than by the ATen op; its other members run as the graph's
own ops. The generated C++ itself is checked by the op-table tests.
"""

from __future__ import annotations

import copy
import math
import operator
from dataclasses import dataclass, field

import torch
from torch import fx
from torch.utils._python_dispatch import TorchDispatchMode

from ..capture import Captured
from ..load import LoadedModel
from ..partition import partition
from ..plan import KernelGroup, KernelStep, Plan
from ..pointwise import op_key
from ..traced import IN_PLACE_DRAWS, empty_in_eager_layout, in_eager_layout, is_random
from .harness import LOWER_FLOATS, as_float64, float64_run, plain_tensors, to_device


@dataclass
class CpuCheck:
    passed: bool
    max_rel_error: float  # over outputs and updated buffers
    detail: list[str]
    culprit: KernelGroup | None = None  # the first kernel whose reference differs from the graph's own ops
    skipped: str | None = None  # why the check did not run (the float64 copy would not fit in memory)


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
    if node.target is torch.tensor:  # a tensor constant: the values the model builds, in float64 (harness.float64_run)
        out = node.target(*args, **kwargs)
        return out.double() if out.dtype in LOWER_FLOATS else out
    if kwargs.get("dtype") in LOWER_FLOATS:  # factory ops and casts follow the float64 run (harness.float64_run)
        kwargs["dtype"] = torch.float64
    if is_random(node) and op_key(node) in IN_PLACE_DRAWS:  # drawn in place into eager's layout, as eager drew it
        return getattr(empty_in_eager_layout(args[0], node.args[0]), IN_PLACE_DRAWS[op_key(node)])(*args[1:], **kwargs)
    if is_random(node):
        # a random op draws in its input's memory order: eager's, as the emitted forward gives it (a kernel before
        # it writes row-major)
        args = tuple(in_eager_layout(v, a) if isinstance(a, fx.Node) else v for v, a in zip(args, node.args))
    return node.target(*args, **kwargs)


def run_kernel_reference(group: KernelGroup, by_name: dict[str, fx.Node], inputs: dict[str, object]) -> dict:
    """The kernel's reference implementation: its ops with torch, on its declared inputs only. Its tensor outputs
    are contiguous, as every generated kernel writes them whatever the layout of its inputs (a view of the output
    after it relies on that: a pool's reference over a strided slice, for one, is not), and floating: a kernel writes
    float32 values (a mask written by a kernel is no index for a torch op after it), as it reads float32 inputs only
    (the binding refuses any other, and so does this)."""
    for name, value in inputs.items():
        if isinstance(value, torch.Tensor) and not value.is_floating_point():
            raise RuntimeError(f"{group.name}: inputs must be float32, got {value.dtype} for {name}")
    local = dict(inputs)
    references = group.family.references(group) if group.family is not None else {}
    if group.family is not None:
        group.family.check_operands(group, inputs)
    for name in group.nodes:
        if name in references:
            local[name] = references[name](local)
        else:
            local[name] = _run_node(by_name[name], local)
    return {o: _as_written(local[o]) for o in group.outputs}


def _as_written(value):
    if not isinstance(value, torch.Tensor):
        return value
    return value.contiguous() if value.is_floating_point() else value.to(torch.float64, memory_format=torch.contiguous_format)


def run_plan(captured: Captured, plan: Plan, state: dict[str, torch.Tensor], user_inputs: list) -> tuple:
    """Execute the plan; returns (user outputs, {buffer fqn: new value})."""
    outputs, buffers, _ = _execute(captured, plan, state, user_inputs)
    return outputs, buffers


def _execute(captured: Captured, plan: Plan, state: dict[str, torch.Tensor], user_inputs: list,
             run_kernel=run_kernel_reference) -> tuple:
    """Execute the plan, each kernel by `run_kernel(group, by_name, inputs)`; returns (user outputs,
    {buffer fqn: new value}, every value computed by name)."""
    by_name = {n.name: n for n in captured.graph.nodes}
    env: dict[str, object] = dict(zip(captured.user_inputs, user_inputs))
    for placeholder, fqn in captured.state_names.items():
        env[placeholder] = state[fqn]
    for step in plan.steps:
        if isinstance(step, KernelStep):
            group = step.group
            env.update(run_kernel(group, by_name, {i: env[i] for i in group.inputs}))
        else:
            node = by_name[step.node]
            env[node.name] = _run_node(node, env) if node.target is not operator.getitem else \
                _materialise(node.args[0], env)[node.args[1]]
    outputs = [env[o] for o in captured.user_outputs]
    buffers = {fqn: env[src] for fqn, src in captured.buffer_mutations.items()}
    return outputs, buffers, env


def graph_scales(captured: Captured, ref: Float64Reference) -> dict[str, float]:
    """The scales of `_scales`, from a float64 run of the graph's own ops (every op a torch call)."""
    torch.manual_seed(RANDOM_SEED)
    with torch.no_grad(), Float32Constants(), float64_run():
        _, _, env = _execute(captured, partition(captured.graph, pointwise_kernels=False), ref.fresh_state(),
                             ref.fresh_inputs())
    return _scales(captured, env)


def _rms(t) -> float:
    if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.numel() == 0:
        return 0.0
    return (t.double().nan_to_num(0.0, 0.0, 0.0).norm() / math.sqrt(t.numel())).item()


def _scales(captured: Captured, env: dict[str, object]) -> dict[str, float]:
    """For each output and updated buffer: the largest RMS among the values it was computed from (its
    ancestors in the graph that the run holds), the scale its rounding errors are relative to."""
    by_name = {n.name: n for n in captured.graph.nodes}
    memo: dict[str, set[str]] = {}

    def ancestors(name: str) -> set[str]:
        if name not in memo:
            memo[name] = set()
            found = set()
            for arg in by_name[name].all_input_nodes:
                found |= {arg.name} | ancestors(arg.name)
            memo[name] = found
        return memo[name]

    targets = {f"output {i}": o for i, o in enumerate(captured.user_outputs) if o is not None}
    targets |= {f"buffer {fqn}": src for fqn, src in captured.buffer_mutations.items()}
    return {key: max((_rms(env[a]) for a in ancestors(name) if a in env), default=0.0)
            for key, name in targets.items()}


def _rel(a: torch.Tensor, b: torch.Tensor, scale: float = 0.0) -> float:
    """||a - b|| / ||b||; with `scale` (the RMS of the values b was computed from), relative to the larger of
    ||b|| and that scale over b's elements: an output that is ~0 by cancellation (the mean of a normalised
    tensor) carries rounding errors of the size of its operands, not of itself."""
    if a.shape != b.shape:
        return float("inf")
    a, b = a.double(), b.double()
    if torch.isnan(a).any() != torch.isnan(b).any():
        return float("inf")
    diff = (a - b).nan_to_num(0.0)
    if not diff.numel():
        return 0.0
    norm = max(b.nan_to_num(0.0).norm().item(), scale * math.sqrt(b.numel()), 1e-30)
    return diff.norm().item() / norm


@dataclass
class Float64Reference:
    """The original model run once in float64 on the CPU: what both CPU checks compare against.

    With a symbolic batch size the run uses a batch of 2, which keeps it fast on a CPU.
    """

    state: dict[str, torch.Tensor]  # state_dict before the forward
    inputs: list  # as they were before the forward: each run gets copies (`fresh_inputs`), as a forward may write them
    outputs: list[torch.Tensor]
    buffers: dict[str, torch.Tensor]  # buffers after the forward (train-mode updates included)
    scales: dict[str, float] = field(default_factory=dict)  # 'output i' / 'buffer fqn' -> the RMS of the
    # values it was computed from (set by the plan's run: `_scales`)

    def fresh_inputs(self) -> list:
        """Copies of the inputs for one run: a forward that writes its inputs (x.mul_(2)) spoils no other run."""
        return to_device(self.inputs, torch.device("cpu"))

    def fresh_state(self) -> dict[str, torch.Tensor]:
        """The state for one run, its parameters shared and its buffers copied: an op of the graph that updates a
        buffer in place (an instance norm tracking running statistics) spoils no other run."""
        return {k: v.clone() if k in self.buffers else v for k, v in self.state.items()}


def float64_check_bytes(loaded: LoadedModel, activation_bytes: int = 0, batch_fraction: float = 1.0) -> int:
    """Host memory the float64 check adds to the loaded model: one float64 copy of its state (twice its float32
    size; the reference and both checked programs share its parameters), a quarter of that again for the
    buffers' copies, the float64 inputs twice, and four times the peak of a forward's values in float64 (the
    reference's outputs, the checked program's, the comparison's differences and the ops' own temporaries: measured
    6.7 GB for a [2, 256, 512, 768] einsum output of 1.6 GB): `activation_bytes` is that peak in float32 at the
    file's sizes (the cost model's), `batch_fraction` the share of the file's batch the check runs at (2 of it
    where the batch is free). A model of large inputs and no parameters (a loss over a 32768 x 32768 tensor)
    needs many times its inputs' size."""
    state = sum(t.numel() * 8 for t in loaded.model.state_dict().values())
    inputs = sum(t.numel() * 8 for t in loaded.inputs if isinstance(t, torch.Tensor) and t.is_floating_point())
    return int(state + state // 4 + batch_fraction * (2 * inputs + 8 * activation_bytes))


def available_bytes() -> int | None:
    """MemAvailable of /proc/meminfo (None where there is no such file)."""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class Float32Constants(TorchDispatchMode):
    """While active, constants built in forward hold float32 values even when built as float64.

    A model that writes `torch.full(shape, 0.51, dtype=x.dtype)` builds a float64 0.51 in the float64
    reference run, while the trace recorded `dtype=torch.float32` (the dtype x had when it was captured):
    the two runs would differ by the constant's float32 rounding (~1e-8), not by anything the plan
    computes. So every float64 run of the check (reference, plan, emitted forward) rounds the values of
    constants to float32, which is what they are on the GPU."""

    OPS = ("aten.full.default", "aten.scalar_tensor.default", "aten.lift_fresh.default", "aten.full_like.default",
           "aten.new_full.default", "aten.fill.Scalar")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if str(func) in self.OPS and isinstance(out, torch.Tensor) and out.dtype == torch.float64:
            return out.float().double()
        return out


RANDOM_SEED = 0  # every float64 run starts from it: random ops (dropout, rand_like) draw the same values


def float64_reference(loaded: LoadedModel, captured: Captured) -> Float64Reference:
    """Run the model once in float64. Memory: the float32 model plus one float64 copy of its state (the
    reference and the checked programs share its parameters; buffers, which a forward updates, are copied)."""
    held = {**dict(loaded.model.named_buffers()), **loaded.model.state_dict()}  # non-persistent buffers too: the
    # graph reads them like the others
    state = {k: v.detach().double() if v.is_floating_point() else v.detach().clone() for k, v in held.items()}
    model = _with_state(loaded.module.Model, loaded.init_args, state, loaded.model)
    dynamic = captured is not None and captured.dynamic_batch
    inputs = [x[:2] if dynamic and isinstance(x, torch.Tensor) else x for x in loaded.inputs]
    inputs = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    torch.manual_seed(RANDOM_SEED)
    with torch.no_grad(), Float32Constants(), float64_run():
        out = model(*to_device(inputs, torch.device("cpu")))  # the model may write its inputs: `inputs` stay as they were
    outputs = list(out) if isinstance(out, (tuple, list)) else [out]
    return Float64Reference(state, inputs, outputs, {k: v.clone() for k, v in model.named_buffers()})


def _with_state(cls, init_args: list, state: dict[str, torch.Tensor], like: torch.nn.Module | None = None):
    """`cls(*init_args)` holding `state`'s parameters themselves (no copy) and copies of its buffers, built
    on the meta device so that no float32 weights are allocated on the way; where the module has state
    outside its state_dict (non-persistent buffers, plain tensor attributes), a float64 copy of `like` (or a fresh
    module) instead."""
    params = {name for name, _ in (like.named_parameters() if like is not None else ())}
    own = {k: v if k in params else v.clone() for k, v in state.items()}
    try:
        with torch.device("meta"):
            module = cls(*init_args)
        module.load_state_dict(own, strict=True, assign=True)
        held = (*module.parameters(), *module.buffers(), *(t for _, _, t in plain_tensors(module)))
        if not any(t.is_meta for t in held):
            return module
    except Exception:  # a module that cannot be built on the meta device: build it as usual
        pass
    if like is not None and issubclass(cls, type(like)):
        module = copy.deepcopy(like)  # like's state as it is, as a `cls` (ModelNew subclasses Model: its forward)
        module.__class__ = cls
    else:
        module = cls(*init_args)
    module = as_float64(module)
    saved = module.state_dict().keys()  # a non-persistent buffer is the copy's own, as it is `like`'s
    module.load_state_dict({k: v for k, v in own.items() if k in saved})
    return module


def _compare(what: str, outputs: list, buffers: dict, ref: Float64Reference, tolerance: float) -> CpuCheck:
    detail, worst = [], 0.0
    if len(outputs) != len(ref.outputs):
        detail.append(f"{what} returns {len(outputs)} outputs, the model {len(ref.outputs)}")
        worst = float("inf")
    for i, (got, want) in enumerate(zip(outputs, ref.outputs)):
        err = _rel(got, want, ref.scales.get(f"output {i}", 0.0))
        worst = max(worst, err)
        detail.append(f"{what} output {i}: shape {list(want.shape)}, relative error {err:.1e}")
    for fqn, value in buffers.items():
        err = _rel(value, ref.buffers[fqn], ref.scales.get(f"buffer {fqn}", 0.0))
        worst = max(worst, err)
        detail.append(f"{what} buffer {fqn}: relative error {err:.1e}")
    return CpuCheck(worst <= tolerance, worst, detail)


def check_on_cpu(captured: Captured, plan: Plan, ref: Float64Reference, tolerance: float = 1e-9) -> CpuCheck:
    """The plan in float64 (kernels by their reference implementations) against the original model; when
    they differ, the first kernel whose reference differs from the graph's own ops is named as the culprit."""
    torch.manual_seed(RANDOM_SEED)
    try:
        with torch.no_grad(), Float32Constants(), float64_run():
            outputs, buffers = run_plan(captured, plan, ref.fresh_state(), ref.fresh_inputs())
    except Exception as exc:
        culprit = first_diverging_kernel(captured, plan, ref, tolerance)
        return CpuCheck(False, float("inf"), [f"plan raised {type(exc).__name__}: {exc}"],
                        culprit[0] if culprit else None)
    check = _compare("plan", outputs, buffers, ref, tolerance)
    if not check.passed and not ref.scales:  # near-zero outputs: judge them against their operands' scale
        ref.scales = graph_scales(captured, ref)
        check = _compare("plan", outputs, buffers, ref, tolerance)
    if not check.passed:
        culprit = first_diverging_kernel(captured, plan, ref, tolerance)
        if culprit:
            check.culprit = culprit[0]
            check.detail.append(f"first kernel to differ from the graph's own ops: {culprit[0].name} "
                                f"({culprit[0].kind}): {culprit[1]}")
    return check


class _Diverged(Exception):
    def __init__(self, group: KernelGroup, why: str):
        super().__init__(why)
        self.group, self.why = group, why


def first_diverging_kernel(captured: Captured, plan: Plan, ref: Float64Reference,
                           tolerance: float) -> tuple[KernelGroup, str] | None:
    """Run the plan in float64 and, at each kernel, its ops by the graph's own ATen ops on the same inputs
    (which the later steps then read): the first kernel whose reference output differs (or raises) and why."""

    def compared(group: KernelGroup, by_name, inputs: dict) -> dict:
        own = dict(inputs)
        for name in group.nodes:
            own[name] = _run_node(by_name[name], own)
        try:
            got = run_kernel_reference(group, by_name, inputs)
        except Exception as exc:
            raise _Diverged(group, f"its reference raised {type(exc).__name__}: {exc}") from exc
        for out in group.outputs:
            err = _rel(got[out], own[out]) if isinstance(own[out], torch.Tensor) else 0.0
            if not err <= tolerance:
                raise _Diverged(group, f"output {out}: relative error {err:.1e} vs the graph's own ops")
        return {o: own[o] for o in group.outputs}

    torch.manual_seed(RANDOM_SEED)
    try:
        with torch.no_grad(), Float32Constants(), float64_run():
            _execute(captured, plan, ref.fresh_state(), ref.fresh_inputs(), compared)
    except _Diverged as found:
        return found.group, found.why
    return None


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
            values = [out[o] for o in group.outputs]
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
    from ..load import import_model_file

    emitted = import_model_file(module_path)
    by_name = {n.name: n for n in captured.graph.nodes} if captured is not None else {}
    emitted._kernels = lambda: _ReferenceKernels(plan, by_name)
    candidate = _with_state(emitted.ModelNew, loaded.init_args, ref.state, loaded.model)
    real_stream = torch.cuda.current_stream
    torch.cuda.current_stream = lambda *a, **k: _NoStream()  # the forward asks for a stream to pass on
    torch.manual_seed(RANDOM_SEED)
    try:
        with torch.no_grad(), Float32Constants(), float64_run():
            got = candidate(*ref.fresh_inputs())
    finally:
        torch.cuda.current_stream = real_stream
    outputs = list(got) if isinstance(got, (tuple, list)) else [got]
    return _compare("emitted", outputs, dict(candidate.named_buffers()), ref, tolerance)
