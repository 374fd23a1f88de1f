"""The report's section "How the kernels are implemented and called": one sentence per kind of kernel the plan
uses (`Family.how`, kept next to the family's code), the path from `ModelNew` to the kernels, and each call in
`ModelNew.forward`. How each family works in general is in `docs/kernels.md`."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .plan import KernelStep

if TYPE_CHECKING:
    from .run import Run

DOCS = "docs/kernels.md"  # the general description of every kind of kernel, in the repository

POINTWISE_HOW = ("Pointwise kernels: a grid-stride loop computes the group's ops per element in fp32, with 16-byte "
                 "loads and stores where aligned, and reads broadcast operands through their strides.")


def kernels_how(run: Run) -> list[str]:
    lines = ["## How the kernels are implemented and called", ""]
    if not run.plan.groups:
        return lines + ["No kernels were generated: `ModelNew.forward` makes the torch calls listed above.", ""]
    used = sorted({g.family for g in run.plan.groups if g.family is not None}, key=lambda f: f.order)
    lines += [f"- {line}" for f in used for line in f.how_for([g for g in run.plan.groups if g.family is f])]
    lines += [f"- {POINTWISE_HOW}"] if any(g.family is None for g in run.plan.groups) else []
    torch_calls = "; the ops left unchanged stay torch calls between them" if _torch_calls(run) else ""
    lines += ["", "`ModelNew(Model)` keeps `Model`'s parameters and builds `30_kernels/` once with `load_inline`; its "
              "`forward` calls the bindings, which check their inputs, allocate the outputs and launch on the "
              f"current CUDA stream{torch_calls}:", ""]
    calls = []
    for g in run.plan.groups:
        shape = g.family.call_shape(g) if g.family is not None else f"iteration shape {list(g.shape)}"
        calls.append(f"- `{', '.join(g.outputs)} = kernels.{g.name}({', '.join([*g.inputs, 'stream'])})`: {shape}")
    return lines + batch_named(calls) + ["", f"How each kind of kernel works in general: `{DOCS}` (fuseforge "
                                             "repository).", ""]


_SYMBOL = re.compile(r"'(s\d+)'")  # a size captured as symbolic, as a plan prints it: ['s77', 8192]


def batch_named(lines: list[str]) -> list[str]:
    """The calls' shapes with their one symbolic size (the batch, which capture leaves free: the kernels take
    any) written `batch`; where the plan has several symbols, they are left as they are."""
    symbols = {m for line in lines for m in _SYMBOL.findall(line)}
    return [_SYMBOL.sub("batch", line) for line in lines] if len(symbols) == 1 else lines


def _torch_calls(run: Run) -> bool:
    return any(not isinstance(s, KernelStep) for s in run.plan.steps)
