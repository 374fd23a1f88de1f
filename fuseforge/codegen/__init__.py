"""Stage `codegen`: the plan's kernels as two C++ translation units (pure functions of the plan).

- the kernel unit (`kernels.cu`) includes only CUDA headers and exposes raw-pointer launchers, so it
  compiles in about a second with nvcc on any machine (CI compiles it and reads `ptxas -v`);
- the binding unit (`binding.cpp`) includes only torch's tensor API (`torch/types.h`) and the header of the
  Python wrapper that `load_inline(functions=...)` applies (`torch/csrc/Exceptions.h`), not all of
  `torch/extension.h` (the C++ frontend's modules, optimisers, data loaders): it checks the tensors, allocates
  the outputs and calls the launchers on the stream handed in from Python. It is most of a build's time: with
  g++ -O3 on the CPU machine (torch 2.13), 87's binding took 16.6 s with `torch/extension.h` and 9.7 s so;
  nvcc takes 1-3 s for a kernel unit.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch
from torch import fx

from ..plan import KernelGroup, Plan
from ..pointwise import PRELUDE
from .layout_kernel import LAYOUT_BINDING_RUNTIME, LAYOUT_KERNEL_RUNTIME
from .pointwise_kernel import KernelSource, kernel_source
from .runtime import BINDING_RUNTIME, KERNEL_RUNTIME, TYPES


@dataclass(frozen=True)
class Extension:
    name: str  # unique per source text: a changed kernel gets a fresh build
    cuda: str
    binding: str
    functions: tuple[str, ...]
    kernels: tuple[KernelSource, ...]
    cuda_flags: tuple[str, ...] = ()  # nvcc flags beyond -O3 (those of the families' runtimes)

    @property
    def empty(self) -> bool:
        return not self.functions

    @property
    def cflags(self) -> tuple[str, ...]:
        """The C++ compiler's flags for the binding (`load_inline`'s extra_cflags)."""
        return ("-O3", HOST_VISIBILITY)

    @property
    def nvcc_flags(self) -> tuple[str, ...]:
        """nvcc's flags for the kernels (`load_inline`'s extra_cuda_cflags): the host code's visibility, the families'."""
        return ("-O3", f"-Xcompiler={HOST_VISIBILITY}", *self.cuda_flags)


# Every unit's host code is built with hidden visibility, so that its launchers' static state (a kernel's raised
# shared-memory limit, a persistent grid's size) is its own. By default GCC makes a static inside a template
# instance a process-wide unique symbol: two extensions loaded in one process that instantiate a launcher with an
# epilogue of the same name (two ModelNew of one model, or of two models with a group of the same name) would share
# it, and the second would launch its kernel without raising the limit ("CUDA error: invalid argument").
HOST_VISIBILITY = "-fvisibility=hidden"


def _banner(model_name: str, what: str) -> str:
    return (f"// fuseforge: {what} for {model_name}.\n"
            "// Generated from the captured graph; the comments name the graph values each kernel computes.\n")


def _source(group: KernelGroup, by_name) -> KernelSource:
    return group.family.source(group, by_name) if group.family is not None else kernel_source(group, by_name)


class KernelCodegenError(Exception):
    """One kernel group's code could not be written; `family` is its kernel family's name (None: pointwise)."""

    def __init__(self, group: KernelGroup, cause: Exception):
        super().__init__(f"kernel {group.name} ({group.kind}): {type(cause).__name__}: {cause}")
        self.family = group.family.name if group.family else None


def _source_of(group: KernelGroup, by_name) -> KernelSource:
    try:
        _reads_float32(group, by_name)
        return _source(group, by_name)
    except Exception as exc:
        raise KernelCodegenError(group, exc) from exc


def _reads_float32(group: KernelGroup, by_name) -> None:
    """Every binding takes its tensors in float32 (cuda/binding.h and the families'): a plan that hands a kernel
    another dtype is refused here, on the CPU, not by the binding on the GPU."""
    for name in group.inputs:
        val = by_name[name].meta.get("val") if name in by_name else None
        if isinstance(val, torch.Tensor) and val.dtype != torch.float32:
            raise TypeError(f"input {name} is a {val.dtype} tensor; kernels read float32")


def generate(plan: Plan, graph: fx.Graph, model_name: str) -> Extension:
    by_name = {n.name: n for n in graph.nodes}
    kernels = tuple(_source_of(g, by_name) for g in plan.groups)
    used = sorted({g.family for g in plan.groups if g.family is not None}, key=lambda f: f.order)
    runtimes = [f.runtime_for([g for g in plan.groups if g.family is f]) for f in used]  # once per used family
    layouts = bool(plan.channels_last)  # ff_channels_last converts the channels-last convolutions' inputs
    cuda = "\n".join([
        _banner(model_name, "CUDA kernels"),
        "#include <cuda_runtime.h>\n#include <cstdint>\n#include <math.h>",
        TYPES, PRELUDE, KERNEL_RUNTIME,
        *dict.fromkeys(part for r in runtimes for part in r.cuda),  # a part two families use, once
        *([LAYOUT_KERNEL_RUNTIME] if layouts else []),
        *[k.cuda for k in kernels],
    ])
    binding = "\n".join([
        _banner(model_name, "torch binding"),
        "#include <torch/types.h>\n#include <torch/csrc/Exceptions.h>\n#include <vector>",
        TYPES, BINDING_RUNTIME,
        *dict.fromkeys(part for r in runtimes for part in r.binding),
        *[k.launcher_decl for k in kernels],
        "",
        *[k.binding for k in kernels],
        *([LAYOUT_BINDING_RUNTIME] if layouts else []),
    ])
    digest = hashlib.sha256((cuda + binding).encode()).hexdigest()[:10]
    stem = "".join(c if c.isalnum() else "_" for c in model_name)
    functions = tuple(k.name for k in kernels) + (("ff_channels_last",) if layouts else ())
    flags = tuple(flag for r in runtimes for flag in r.nvcc_flags)
    return Extension(f"ff_{stem}_{digest}", cuda, binding, functions, kernels, flags)
