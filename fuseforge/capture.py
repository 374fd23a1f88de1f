"""Stage `capture`: the model as a functional ATen graph with shapes, dtypes and state_dict names.

`torch.export` traces the model (in the mode it was built in, train mode for a fresh module) into a
functional graph of ATen ops; in-place updates of buffers (BatchNorm running statistics) become
explicit outputs that we write back. Dimension 0 of the inputs is exported as a symbolic size when the
model allows it, so the kernels built from the graph do not depend on the batch size.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch
from torch import fx
from torch.export import Dim, ExportedProgram
from torch.export.graph_signature import ConstantArgument, InputKind, OutputKind

from .load import LoadedModel


class CaptureError(Exception):
    """The model could not be turned into a graph."""


@dataclass
class Captured:
    """An exported graph and the mapping of its placeholders back to the model."""

    program: ExportedProgram
    graph: fx.Graph
    state_names: dict[str, str]  # placeholder name -> state_dict name (parameters and buffers)
    parameter_placeholders: set[str]
    user_inputs: list[str]  # placeholder names of forward's arguments, in order
    user_outputs: list[str | None]  # node names of forward's outputs (None: a constant output)
    buffer_mutations: dict[str, str]  # state_dict name of a buffer -> node holding its new value
    dynamic_batch: bool
    training: bool
    mode_dependent: bool  # the eval-mode graph differs from the captured one
    notes: list[str] = field(default_factory=list)
    number_inputs: dict[str, object] = field(default_factory=dict)  # forward's Python-number arguments by
    # name: the values the trace built into the graph (ModelNew runs the model's forward for other values)
    input_mutations: dict[str, str] = field(default_factory=dict)  # placeholder of an input the forward writes
    # (x.mul_(2)) -> node holding its new value: ModelNew writes it back, as the model does

    def node(self, name: str) -> fx.Node:
        for n in self.graph.nodes:
            if n.name == name:
                return n
        raise KeyError(name)


def _export(model: torch.nn.Module, inputs: tuple, dynamic: bool) -> ExportedProgram:
    dynamic_shapes = None
    if dynamic:
        batch = Dim("batch")
        dynamic_shapes = tuple({0: batch} if isinstance(x, torch.Tensor) else None for x in inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes)
        return program.run_decompositions({})


def _can_be_dynamic(inputs: list) -> bool:
    sizes = {t.shape[0] if t.dim() > 0 else None for t in inputs if isinstance(t, torch.Tensor)}
    return len(sizes) == 1 and None not in sizes and next(iter(sizes)) >= 2


def _signature_maps(program: ExportedProgram):
    sig = program.graph_signature
    state, params, user_inputs = {}, set(), []
    for spec in sig.input_specs:
        name = spec.arg.name
        if spec.kind == InputKind.USER_INPUT:
            user_inputs.append(name)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            state[name] = spec.target
            if spec.kind == InputKind.PARAMETER:
                params.add(name)
        else:
            raise CaptureError(f"unsupported graph input {name} of kind {spec.kind.name}")
    outputs, mutations, written = [], {}, {}
    for spec in sig.output_specs:
        arg_name = getattr(spec.arg, "name", None)
        if spec.kind == OutputKind.USER_OUTPUT:
            outputs.append(arg_name)
        elif spec.kind == OutputKind.BUFFER_MUTATION:
            mutations[spec.target] = arg_name
        elif spec.kind == OutputKind.USER_INPUT_MUTATION:
            written[spec.target] = arg_name
        else:
            raise CaptureError(f"unsupported graph output of kind {spec.kind.name}")
    return state, params, user_inputs, outputs, mutations, written


def literal_constants(program: ExportedProgram) -> list[str]:
    """Tensor constants built in forward from Python values (`torch.tensor(0.5)`, `torch.tensor([1., 2.])`)
    become nodes that build them again: `torch.tensor(values, dtype=..., device=...)`, as the model does.

    torch.export lifts such a constant to a graph input of kind CONSTANT_TENSOR; as a node of its own it is
    emitted as a torch call like any other op. Returns a note per constant."""
    graph, notes = program.graph, []
    placeholders = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    first_op = next((n for n in graph.nodes if n.op != "placeholder"), None)
    kept = []
    for spec in program.graph_signature.input_specs:
        if spec.kind != InputKind.CONSTANT_TENSOR:
            kept.append(spec)
            continue
        value = program.constants[spec.target].detach().clone()
        placeholder = placeholders[spec.arg.name]
        with graph.inserting_before(first_op):
            node = graph.call_function(torch.tensor, (value.tolist(),),
                                       {"dtype": value.dtype, "device": torch.device("cpu")})
        node.meta["val"] = value
        placeholder.replace_all_uses_with(node)
        graph.erase_node(placeholder)
        notes.append(f"tensor constant {spec.arg.name} {describe_value_of(value)} built in forward: kept as "
                     f"{node.name} = torch.tensor(...)")
    program.graph_signature.input_specs[:] = kept
    return notes


def drop_metadata_asserts(graph: fx.Graph) -> int:
    """Remove `aten._assert_tensor_metadata` nodes (what `.to(x.device)` of a tensor already there leaves
    behind): they assert the dtype and device the trace saw, which the float64 CPU check changes on purpose."""
    asserts = [n for n in graph.nodes if n.op == "call_function"
               and str(n.target) == "aten._assert_tensor_metadata.default" and not n.users]
    for node in asserts:
        graph.erase_node(node)
    return len(asserts)


# ATen's aliases of ops (torch.multiply is torch.mul, torch.clip is torch.clamp, ...): the same schema and the same
# values as the op each names, which every table, rewrite rule and kernel family knows by that name
ALIASES = {
    "multiply.Tensor": "mul.Tensor", "multiply.Scalar": "mul.Scalar",
    "divide.Tensor": "div.Tensor", "divide.Scalar": "div.Scalar",
    "true_divide.Tensor": "div.Tensor", "true_divide.Scalar": "div.Scalar",
    "subtract.Tensor": "sub.Tensor", "subtract.Scalar": "sub.Scalar",
    "clip.default": "clamp.default", "absolute.default": "abs.default", "negative.default": "neg.default",
    "fix.default": "trunc.default",
    "greater.Tensor": "gt.Tensor", "greater.Scalar": "gt.Scalar",
    "greater_equal.Tensor": "ge.Tensor", "greater_equal.Scalar": "ge.Scalar",
    "less.Tensor": "lt.Tensor", "less.Scalar": "lt.Scalar",
    "less_equal.Tensor": "le.Tensor", "less_equal.Scalar": "le.Scalar",
    "not_equal.Tensor": "ne.Tensor", "not_equal.Scalar": "ne.Scalar",
    "special_expit.default": "sigmoid.default", "special_erf.default": "erf.default",
    "special_exp2.default": "exp2.default", "special_expm1.default": "expm1.default",
    "special_log1p.default": "log1p.default",
}


def _aten(name: str):
    op, overload = name.split(".")
    return getattr(getattr(torch.ops.aten, op), overload)


def name_aliases_by_their_op(graph: fx.Graph) -> int:
    """Call each alias by the op it names (same arguments, same values); returns how many were renamed."""
    renamed = 0
    for node in graph.nodes:
        key = str(node.target).removeprefix("aten.")
        if node.op == "call_function" and key in ALIASES:
            node.target = _aten(ALIASES[key])
            renamed += 1
    return renamed


def _ops(program: ExportedProgram) -> list[str]:
    return [str(n.target) for n in program.graph.nodes if n.op == "call_function"]


def capture(loaded: LoadedModel) -> Captured:
    """Export the loaded model; try a symbolic batch size first, fall back to the exact shapes."""
    model, inputs = loaded.model, tuple(loaded.inputs)
    notes = []
    program = None
    if _can_be_dynamic(loaded.inputs):
        try:
            program = _export(model, inputs, dynamic=True)
        except Exception as exc:  # the model fixes its batch size somewhere
            notes.append(f"batch size kept static: symbolic export failed ({type(exc).__name__})")
    else:
        notes.append("batch size kept static: inputs do not share a dimension 0 of size >= 2")
    dynamic = program is not None
    if program is None:
        try:
            program = _export(model, inputs, dynamic=False)
        except Exception as exc:
            raise CaptureError(f"torch.export failed: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None

    training = model.training
    mode_dependent = False
    try:
        model.train(not training)
        other = _export(model, inputs, dynamic=dynamic)
        mode_dependent = _ops(other) != _ops(program)
    except Exception:
        mode_dependent = True
    finally:
        model.train(training)

    notes += literal_constants(program)
    drop_metadata_asserts(program.graph)
    name_aliases_by_their_op(program.graph)
    state, params, user_inputs, outputs, mutations, written = _signature_maps(program)
    numbers = {spec.arg.name: spec.arg.value for spec in program.graph_signature.input_specs
               if spec.kind == InputKind.USER_INPUT and isinstance(spec.arg, ConstantArgument)}
    return Captured(program, program.graph, state, params, user_inputs, outputs, mutations,
                    dynamic, training, mode_dependent, notes, numbers, written)


def describe_value(node: fx.Node) -> str:
    """'f32[1024, 8192]' for a tensor-valued node, the Python type otherwise."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        dtype = str(val.dtype).removeprefix("torch.")
        short = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
                 "int64": "i64", "int32": "i32", "bool": "bool"}.get(dtype, dtype)
        return f"{short}{list(val.shape)}"
    if isinstance(val, (tuple, list)):
        return "(" + ", ".join(describe_value_of(v) for v in val) + ")"
    return type(val).__name__ if val is not None else "?"


def describe_value_of(val) -> str:
    if isinstance(val, torch.Tensor):
        return f"{str(val.dtype).removeprefix('torch.')}{list(val.shape)}"
    return type(val).__name__


def format_captured(c: Captured) -> str:
    """The `00_captured.txt` artefact: every node with its type, state_dict names spelled out."""
    lines = [f"# captured in {'train' if c.training else 'eval'} mode; batch size "
             f"{'symbolic' if c.dynamic_batch else 'static'}"]
    lines += [f"# {n}" for n in c.notes]
    for node in c.graph.nodes:
        if node.op == "placeholder":
            role = ("parameter " + c.state_names[node.name]) if node.name in c.parameter_placeholders else (
                ("buffer " + c.state_names[node.name]) if node.name in c.state_names else "input")
            lines.append(f"{node.name:28s} {describe_value(node):24s} {role}")
        elif node.op == "call_function":
            args = ", ".join(_fmt_arg(a) for a in node.args)
            kwargs = ", ".join(f"{k}={_fmt_arg(v)}" for k, v in node.kwargs.items())
            call = f"{_target_name(node.target)}({', '.join(x for x in (args, kwargs) if x)})"
            lines.append(f"{node.name:28s} {describe_value(node):24s} = {call}")
    lines.append("outputs: " + ", ".join(str(o) for o in c.user_outputs))
    for fqn, src in c.buffer_mutations.items():
        lines.append(f"buffer {fqn} <- {src}")
    for name, src in c.input_mutations.items():
        lines.append(f"input {name} <- {src}")
    return "\n".join(lines) + "\n"


def _target_name(target) -> str:
    return str(target) if isinstance(target, torch._ops.OpOverload) else getattr(target, "__name__", str(target))


def _fmt_arg(a) -> str:
    if isinstance(a, fx.Node):
        return a.name
    if isinstance(a, (list, tuple)):
        return "[" + ", ".join(_fmt_arg(x) for x in a) + "]"
    return repr(a)
