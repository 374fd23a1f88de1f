"""Stage `emit`: one standalone `model_new.py` in the seed requests' format.

The file holds the original model file verbatim (so `Model`, `get_inputs` and `get_init_inputs` are
unchanged), the generated CUDA and binding sources, and `class ModelNew(Model)`: it inherits
`__init__`, hence the same signature, parameters, buffers, creation order and seeded initialisation,
and overrides `forward` with the partitioned program. Kernels are built with `load_inline` at the first
forward, so the module can be imported and constructed on a machine without a GPU.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import torch
from torch import fx

from .capture import Captured
from .codegen import Extension
from .codegen.writer import Writer
from .plan import KernelStep, Plan
from .pointwise import op_key
from .traced import IN_PLACE_DRAWS, eager_dim_order, is_random


class EmitError(Exception):
    """The program cannot be written as Python (an op or argument kind emit does not know)."""


@dataclass(frozen=True)
class EmitContext:
    captured: Captured
    plan: Plan
    extension: Extension
    model_file: str
    source: str
    init_args: list
    output_is_tuple: bool


def _state_access(fqn: str, is_parameter: bool) -> str:
    """`self.gemm.weight`, or `self.get_buffer('layers.0.running_mean')` where a part is no identifier."""
    if all(part.isidentifier() for part in fqn.split(".")):
        return "self." + fqn
    return f"self.{'get_parameter' if is_parameter else 'get_buffer'}({fqn!r})"


def _state_expr(ctx: EmitContext, placeholder: str) -> str:
    is_parameter = placeholder in ctx.captured.parameter_placeholders
    return _state_access(ctx.captured.state_names[placeholder], is_parameter)


def _arg(value, device_expr: str) -> str:
    if isinstance(value, fx.Node):
        return value.name
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_arg(v, device_expr) for v in value)
        return f"[{inner}]"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f"float({str(value)!r})"
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, torch.device):
        return device_expr
    if isinstance(value, (torch.memory_format, torch.layout)):
        return str(value)
    raise EmitError(f"cannot write argument {value!r} of type {type(value).__name__}")


def _call(node: fx.Node, device_expr: str, memory_format: str | None = None) -> str:
    """The op's call; with `memory_format`, its first two arguments (a convolution's input and weight) are
    made channels-last first: the input by the extension's `ff_channels_last` transpose kernel, the weight by
    PyTorch."""
    if node.target is operator.getitem:
        return f"{node.args[0].name}[{node.args[1]!r}]"
    if isinstance(node.target, torch._ops.OpOverload):
        fn = f"torch.ops.{op_key(node)}"
    elif node.target is torch.tensor:  # a tensor constant the model builds in forward (capture.literal_constants)
        fn = "torch.tensor"
    elif getattr(operator, getattr(node.target, "__name__", ""), None) is node.target:
        fn = f"operator.{node.target.__name__}"
    else:
        raise EmitError(f"cannot write a call of {node.target!r}")
    args = [_arg(a, device_expr) for a in node.args]
    if is_random(node) and op_key(node) in IN_PLACE_DRAWS:  # drawn in place into eager's layout, as eager drew it
        rest = args[1:] + [f"{k}={_arg(v, device_expr)}" for k, v in node.kwargs.items()]
        return f"{_empty_in_eager_layout(node.args[0], args[0])}.{IN_PLACE_DRAWS[op_key(node)]}({', '.join(rest)})"
    if is_random(node):
        args = [_in_eager_layout(a, text) for a, text in zip(node.args, args)]
    if memory_format:
        args[:2] = [f"kernels.ff_channels_last({args[0]}, stream)", f"{args[1]}.contiguous(memory_format={memory_format})"]
    args += [f"{k}={_arg(v, device_expr)}" for k, v in node.kwargs.items()]
    return f"{fn}({', '.join(args)})"


def _in_eager_layout(value, text: str) -> str:
    """A random op draws in the memory order of its input (dropout's mask follows the input's strides): give
    it the value in eager's layout, whatever layout the kernel that computed it wrote."""
    order = eager_dim_order(value) if isinstance(value, fx.Node) else None
    if order is None:
        return text
    inverse = [order.index(d) for d in range(len(order))]
    return f"{text}.permute({order}).contiguous().permute({inverse})"


def _empty_in_eager_layout(value: fx.Node, text: str) -> str:
    """`traced.empty_in_eager_layout`, spelled: an empty tensor like `text` in eager's memory order (no copy)."""
    order = eager_dim_order(value)
    if order is None:
        return f"torch.empty_like({text}, memory_format=torch.contiguous_format)"
    inverse = [order.index(d) for d in range(len(order))]
    return f"torch.empty_like({text}.permute({order}), memory_format=torch.contiguous_format).permute({inverse})"


_BN_FUNCTIONAL = "aten._native_batch_norm_legit_functional.default"


def in_place_batch_norms(c: Captured) -> dict[str, set[str]]:
    """Train-mode BatchNorms whose new running statistics only update their own buffers.

    The functional graph computes new running statistics and copies them into the buffers; PyTorch's
    `batch_norm` does the same in place (through cuDNN, as eager does), so it is emitted instead:
    node name -> the buffer fqns it updates itself.
    """
    found = {}
    source_of = {value: fqn for fqn, value in c.buffer_mutations.items()}
    for node in c.graph.nodes:
        if node.op != "call_function" or str(node.target) != _BN_FUNCTIONAL:
            continue
        stats = {3: node.args[3], 4: node.args[4]}
        if not all(isinstance(a, fx.Node) and a.name in c.state_names and len(a.users) == 1
                   for a in stats.values()):
            continue  # the old statistics are read elsewhere: keep the functional form
        users = {u.args[1]: u for u in node.users if u.target is operator.getitem}
        if len(users) != len(node.users):
            continue
        updates = set()
        for index, buffer in stats.items():
            user = users.get(index)
            if user is not None and (len(user.users) != 1 or source_of.get(user.name) != c.state_names[buffer.name]):
                break
            if user is not None:
                updates.add(c.state_names[buffer.name])
        else:
            found[node.name] = updates
    return found


def _emit_torch_step(node: fx.Node, bn: dict[str, set[str]], device_expr: str,
                     channels_last: frozenset[str] = frozenset()) -> str | None:
    """One line for a torch step, or None when an in-place BatchNorm made it unnecessary."""
    if node.name in bn:
        x, w, b, mean, var, training, momentum, eps = node.args[:8]
        return (f"{node.name} = torch.ops.aten.batch_norm.default({x.name}, {_arg(w, device_expr)}, "
                f"{_arg(b, device_expr)}, {mean.name}, {var.name}, {training!r}, {momentum!r}, {eps!r}, True)"
                "  # updates the running statistics in place")
    if node.target is operator.getitem and node.args[0].name in bn:
        return f"{node.name} = {node.args[0].name}" if node.args[1] == 0 else None
    if node.name in channels_last:  # a convolution given channels-last input and weight returns its output so
        fmt = "torch.channels_last" if node.meta["val"].dim() == 4 else "torch.channels_last_3d"
        return f"{node.name} = {_call(node, device_expr, fmt)}  # channels-last: its readers read NHWC"
    return f"{node.name} = {_call(node, device_expr)}"


def _release_after(plan: Plan, by_name: dict[str, fx.Node], keep: set) -> list[list[str]]:
    """For each step, the intermediate values it reads for the last time (to `del` right after it)."""
    reads = []
    for step in plan.steps:
        names = step.group.inputs if isinstance(step, KernelStep) else \
            [a.name for a in by_name[step.node].all_input_nodes]
        reads.append([n for n in names if by_name[n].op == "call_function" and n not in keep])
    last = {name: i for i, names in enumerate(reads) for name in names}
    return [sorted({n for n in names if last[n] == i}) for i, names in enumerate(reads)]


def _forward(ctx: EmitContext) -> str:
    c = ctx.captured
    by_name = {n.name: n for n in c.graph.nodes}
    w = Writer()
    w.line(f"def forward(self, {', '.join(c.user_inputs)}):")
    with w.indent():
        if c.mode_dependent:
            w.line(f"if self.training != {c.training!r}:  # only the {'train' if c.training else 'eval'}"
                   "-mode graph was compiled")
            w.line(f"    return super().forward({', '.join(c.user_inputs)})")
        if c.number_inputs:
            names, values = list(c.number_inputs), list(c.number_inputs.values())
            w.line(f"if ({', '.join(names)},) != {tuple(values)!r}:  # the numbers the kernels were built for")
            w.line(f"    return super().forward({', '.join(c.user_inputs)})")
        for name in c.state_names:
            if by_name[name].users:
                w.line(f"{name} = {_state_expr(ctx, name)}")
        if not ctx.extension.empty:
            w.line("kernels = _kernels()")
            w.line("stream = torch.cuda.current_stream().cuda_stream")
        tensors = [name for name in c.user_inputs if name not in c.number_inputs]
        device_expr = f"{tensors[0]}.device" if tensors else "None"
        in_kernels = {n for g in ctx.plan.groups for n in g.nodes}  # a channel kernel returns new statistics
        bn = {name: fqns for name, fqns in in_place_batch_norms(c).items() if name not in in_kernels}
        release = _release_after(ctx.plan, by_name, keep=set(c.user_outputs) | set(c.buffer_mutations.values())
                                 | set(c.input_mutations.values()))
        for i, step in enumerate(ctx.plan.steps):
            if isinstance(step, KernelStep):
                g = step.group
                what = g.family.call_comment(g) if g.family is not None else "one kernel"
                ops = [op_key(by_name[n]).split('.')[1] for n in g.nodes if by_name[n].target is not operator.getitem]
                w.line(f"# {' -> '.join(ops)}: {what}")
                w.line(f"{', '.join(g.outputs)}{',' if len(g.outputs) > 1 else ''} = "
                       f"kernels.{g.name}({', '.join([*g.inputs, 'stream'])})")
            else:
                line = _emit_torch_step(by_name[step.node], bn, device_expr, ctx.plan.channels_last)
                if line:
                    w.line(line)
            if release[i]:
                w.line(f"del {', '.join(release[i])}  # last use: free the memory now, as eager would")
        updated_in_place = set().union(*bn.values()) if bn else set()
        for fqn, value in c.buffer_mutations.items():
            if fqn in updated_in_place:
                continue
            w.line(f"{_state_access(fqn, is_parameter=False)}.copy_({value})  # buffer update")
        for name, value in c.input_mutations.items():
            w.line(f"{name}.copy_({value})  # the model writes this input")
        if any(o is None for o in c.user_outputs):
            raise EmitError("the model returns a constant; not supported yet")
        outs = ", ".join(c.user_outputs)
        w.line(f"return ({outs},)" if ctx.output_is_tuple and len(c.user_outputs) == 1 else
               f"return {outs}" if not ctx.output_is_tuple else f"return ({outs})")
    return w.text()


def _module_text(ctx: EmitContext, forward: str | None = None) -> str:
    ext = ctx.extension
    w = Writer()
    w.line(f'"""ModelNew for {ctx.model_file}, generated by fuseforge.')
    w.line("")
    if forward is None:
        w.line("The original model file follows verbatim; ModelNew inherits its __init__ (same signature, "
               "parameters,")
        w.line("buffers and initialisation) and replaces forward with fused CUDA kernels built by load_inline at "
               "the")
        w.line(f"first call. Compiled for get_init_inputs() = {ctx.init_args!r}.")
    else:
        w.line("The original model file follows verbatim; ModelNew inherits its __init__ and runs the model's own")
        w.line("forward: no plan with generated kernels both passed verification and ran faster than eager for")
        w.line("this model (see the report).")
    w.line("Run this file to check ModelNew against Model on the GPU and time both.")
    w.line('"""')
    w.line("")
    w.line("import functools")
    w.line("import inspect")
    w.line("import operator  # noqa: F401  (used by symbolic size arithmetic, when present)")
    w.line("")
    w.line("import torch")
    w.line("from torch.utils.cpp_extension import load_inline")
    w.line("")
    w.line(f"# ---------------------------------------------------------------- original model: {ctx.model_file}")
    w.lines(ctx.source.rstrip())
    w.line("")
    w.line("")
    w.line("# ---------------------------------------------------------------- generated kernels")
    if ext.empty:
        w.line("# No op of this model is computed by a generated kernel (see the report).")
    else:
        w.line(f"CUDA_SOURCE = r\"\"\"\n{ext.cuda}\"\"\"")
        w.line("")
        w.line(f"BINDING_SOURCE = r\"\"\"\n{ext.binding}\"\"\"")
        w.line("")
        w.line("")
        w.lines(_LOADER.format(name=ext.name, functions=list(ext.functions), cflags=_list(ext.cflags),
                               cuda_flags=_list(ext.nvcc_flags)))
    w.line("")
    w.line("")
    w.line(f"_COMPILED_FOR_INIT_ARGS = {ctx.init_args!r}")
    w.line("")
    w.line("")
    w.lines(_CLASS_HEAD)
    w.line("")
    with w.indent():
        w.lines(_forward(ctx) if forward is None else forward)
    w.line("")
    w.line("")
    w.line("ModelNew.__init__.__signature__ = inspect.signature(Model.__init__)")
    w.line("")
    w.line("")
    w.lines(_MAIN)
    return w.text()


def _list(flags: tuple[str, ...]) -> str:
    return "[" + ", ".join(f'"{f}"' for f in flags) + "]"


def emit_model_forward(model_file: str, source: str, init_args: list) -> str:
    """The text of a `model_new.py` whose ModelNew runs the model's own forward (the ladder's last rung)."""
    ctx = EmitContext(None, None, Extension("", "", "", (), ()), model_file, source, init_args, False)
    text = _module_text(ctx, "def forward(self, *args, **kwargs):\n    return super().forward(*args, **kwargs)\n")
    compile(text, "model_new.py", "exec")
    return text


def emit(ctx: EmitContext) -> str:
    """The text of `model_new.py`; it is valid Python (checked by compiling it)."""
    text = _module_text(ctx)
    compile(text, "model_new.py", "exec")
    return text


_LOADER = '''@functools.cache
def _kernels():
    """Build (once, cached on disk by torch) and load the extension with the fused kernels."""
    return load_inline(
        name="{name}",
        cpp_sources=[BINDING_SOURCE],
        cuda_sources=[CUDA_SOURCE],
        functions={functions!r},
        extra_cflags={cflags},
        extra_cuda_cflags={cuda_flags},
        no_implicit_headers=True,
    )'''

_CLASS_HEAD = '''class ModelNew(Model):
    """Model with its forward compiled by fuseforge; parameters and buffers are Model's own."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        bound = inspect.signature(Model.__init__).bind(self, *args, **kwargs)
        bound.apply_defaults()
        given = list(bound.arguments.values())[1 : 1 + len(_COMPILED_FOR_INIT_ARGS)]
        if repr(given) != repr(list(_COMPILED_FOR_INIT_ARGS)):
            raise ValueError(
                f"ModelNew was compiled for init args {_COMPILED_FOR_INIT_ARGS!r}, got {given!r}: "
                "constants of the model are built into its kernels; run fuseforge again for these args."
            )
'''

_MAIN = '''if __name__ == "__main__":
    # Self-check on the GPU: same weights, same inputs, ModelNew against Model; then time both.
    torch.manual_seed(0)
    reference = Model(*get_init_inputs()).cuda()
    candidate = ModelNew(*get_init_inputs()).cuda()
    candidate.load_state_dict(reference.state_dict())
    inputs = [x.cuda() for x in get_inputs()]
    with torch.no_grad():
        expected, got = reference(*inputs), candidate(*inputs)
        expected = expected if isinstance(expected, (tuple, list)) else (expected,)
        got = got if isinstance(got, (tuple, list)) else (got,)
        for i, (e, g) in enumerate(zip(expected, got)):
            err = ((g.double() - e.double()).norm() / e.double().norm().clamp_min(1e-30)).item()
            print(f"output {i}: shape {tuple(g.shape)}, relative error vs Model {err:.2e}")
        for name, module in (("Model", reference), ("ModelNew", candidate)):
            times = []
            for _ in range(25):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                module(*inputs)
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end))
            print(f"{name:9s} median {sorted(times)[len(times) // 2]:.3f} ms")'''
