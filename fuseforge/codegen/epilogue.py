"""What the kernel families with an epilogue functor share (a GEMM's, a convolution's): the anchor's value is the
accumulator of one output element, then the group's pointwise chain runs on it before the one store.

The family decides how an operand class is indexed (`index`: class -> C++ index expression) and spells the
anchor's own value; the functor's fields, its operand loads, the chain, the extra outputs and the binding's
operand and output lines are written here once.
"""

from __future__ import annotations

from torch import fx

from .. import pointwise
from ..plan import KernelGroup
from .pointwise_kernel import cpp_name
from .writer import Writer


def field(name: str, cls: str) -> str:
    """The functor's field (and the launcher's parameter) of epilogue operand `name` read as class `cls`."""
    return f"{cpp_name(name)}_{cls}"


def fields(w: Writer, group: KernelGroup, roles: dict[str, str]) -> None:
    """The functor's pointer fields: each epilogue operand (with its role), each output past the first."""
    for name, cls in group.spec.operands:
        w.line(f"const float* {field(name, cls)};  // {name}: {roles[cls]}")
    for name in group.outputs[1:]:
        w.line(f"float* out_{name};  // {name}, written here (the kernel stores {group.outputs[0]})")


def chain(w: Writer, group: KernelGroup, by_name: dict[str, fx.Node], index: dict[str, str], anchor_line: str,
          returns: tuple[str, set[str]] | None = None, plain_loads: bool = False) -> None:
    """The functor's body after its index locals: the operand loads, the anchor's value (`anchor_line`), the
    pointwise chain, the extra outputs' stores, and the return of the first output; or, with `returns` =
    (value, readers), the return of member `value`, whose readers `readers` (members) are the kernel's own code, not
    the chain's (a conv kernel's reduction). The operands are read through the read-only cache (`__ldg`), or with
    `plain_loads` as plain loads, which the compiler may merge where the kernel calls the functor for several
    values of one channel with no store between (`__ldg`, an asm load, is never merged)."""
    for name, cls in group.spec.operands:
        load = f"{field(name, cls)}[{index[cls]}]" if plain_loads else f"__ldg({field(name, cls)} + {index[cls]})"
        w.line(f"const float {cpp_name(name)} = {load};")
    for name in group.nodes:
        if name == group.spec.anchor:
            w.line(anchor_line)
            continue
        if returns and name in returns[1]:
            continue
        node = by_name[name]
        w.line(f"const {pointwise.result_type(node)} {cpp_name(name)} = {pointwise.spell(node, lambda n: cpp_name(n.name))};")
    for name in group.outputs[1:]:
        w.line(f"out_{name}[ff_at] = {cpp_name(name)};")
    w.line(f"return {cpp_name(returns[0] if returns else group.outputs[0])};")


def assign_fields(w: Writer, group: KernelGroup) -> None:
    """The launcher's copy of its pointer parameters into the functor `epi`."""
    for name, cls in group.spec.operands:
        w.line(f"epi.{field(name, cls)} = {field(name, cls)};")
    for name in group.outputs[1:]:
        w.line(f"epi.out_{name} = {cpp_name(name)};")


def launcher_pointers(group: KernelGroup, main: list[str]) -> list[str]:
    """The launcher's pointer parameters: the main loop's (`main`), the first output, the epilogue operands, the
    other outputs."""
    return (main + [f"float* {cpp_name(group.outputs[0])}"]
            + [f"const float* {field(n, c)}" for n, c in group.spec.operands]
            + [f"float* {cpp_name(o)}" for o in group.outputs[1:]])


def binding_operands(w: Writer, group: KernelGroup, check: str, prepared: str, enum: dict[str, str]) -> None:
    """The binding's epilogue operands, each checked against its class by `check`(kernel, name, tensor,
    `prepared`, class enum)."""
    for name, cls in group.spec.operands:
        w.line(f'const torch::Tensor {field(name, cls)} = {check}(kernel, "{name}", {cpp_name(name)}, {prepared}, '
               f"{enum[cls]});")


def pointer_arguments(group: KernelGroup) -> list[str]:
    """The binding's pointer arguments of the launcher after the main loop's: first output, operands, others."""
    outs = [cpp_name(o) for o in group.outputs]
    return ([f"{outs[0]}.data_ptr<float>()"] + [f"{field(n, c)}.data_ptr<float>()" for n, c in group.spec.operands]
            + [f"{o}.data_ptr<float>()" for o in outs[1:]])
