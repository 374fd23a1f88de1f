"""The ladder of plans: when a plan fails a check, the next plan removes the cause, not everything.

From the plan expected fastest down to the simplest, each rung a strict simplification of the one before:

    1. the default plan: every kernel family, layout changes, pointwise kernels, rewrites
    2. without the kernel family that failed (when the failure names one: a kernel that did not generate,
       or whose float64 reference differs from the graph's own ops)
    3. without layout changes (no convolution runs channels-last)
    4. where the failure names no family (GPU verification: an output off its bound, at the grader's magnitudes, say)
       and the plan used several: without one of them, then the next, in DROP_ORDER (the statistics families, which
       large common offsets stress, before the matrix families, which carry most of the speedup), while two or
       more remain
    5. without any kernel family (pointwise kernels only)
    6. without generated kernels (the rewritten graph as torch calls)
    7. without rewrites (the captured graph as torch calls)
    8. the model's own forward (when even capture failed)

A plan that verified and ran faster than eager but slower than torch.compile, with kernels of the matrix families
(conv, gemm: they replace a cuDNN or cuBLAS call on the cost model's word, and a wrong guess costs the most there),
gets a second opinion: the same plan with the library's convolutions and GEMMs (`second_opinion`) is measured too, and
the faster of the two verified plans is kept.

A rung is skipped when it would not change the failed plan (no layout change to remove, no rewrite that
fired). Every rung is checked like the first: CPU float64 check, build, GPU verification. A plan whose kernels
do none of the model's work (`token_kernels`) fails at partition and moves down like any other failure. A plan that
verified but ran slower than eager also moves down, and the fastest verified rung is kept; after such a plan, or
one whose kernels did none of the model's work, the rungs of torch calls that run eager's own ops (the graph as
captured, or as rewritten where the rewrites removed no FLOPs or traffic: a convolution's bias split off into an add)
are skipped: they cannot be faster than the model's own forward.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from torch import fx

from .config import OptimizeConfig
from .families import NAMES, switched_on
from .plan import KernelStep, Plan

# Which family a failure that names none gives up first, of those its plan used (rung 4).
DROP_ORDER = ("channel_norms", "rows", "channel_reductions", "gemm", "conv")

# The families whose kernels replace a library's convolution or GEMM where the cost model expects them faster
MATRIX_FAMILIES = ("conv", "gemm")


@dataclass(frozen=True)
class Failure:
    """Why a rung was left: the stage, the one-line reason and what the failed plan used."""

    stage: str
    reason: str
    family: str | None = None  # the name of the kernel family the failure is attributed to
    used_families: frozenset[str] = frozenset()  # by name
    used_layout: bool = False
    used_kernels: bool = False
    rewrites_fired: bool = False
    verified: bool = False  # it verified, but ran slower than eager (or than the plan named by `outrun_by`)
    outrun_by: str = "eager"
    rewrites_saved: bool = False  # the rewrites that fired removed FLOPs or traffic (at the traced sizes)
    token: bool = False  # its kernels did none of the model's work (`token_kernels`)


def describe(config: OptimizeConfig) -> str:
    """A rung's name, from what it keeps."""
    if not config.capture:
        return "the model's own forward"
    if not config.pointwise_kernels:
        return "torch calls of the " + ("rewritten" if config.rewrites else "captured") + " graph"
    names = [f.name for f in switched_on(config)]
    if len(names) == len(NAMES):
        name = "every kernel family"
    elif names:
        name = ("kernel family " if len(names) == 1 else "kernel families ") + ", ".join(names)
    else:
        name = "pointwise kernels only"
    return name + ("" if config.layout else ", no layout changes")


def next_rung(config: OptimizeConfig, failure: Failure) -> OptimizeConfig | None:
    """The next simpler plan after `config` failed (None: nothing simpler is left)."""
    if not config.capture:
        return None
    plain = config.without_families()
    if failure.stage == "capture":
        return plain.without("layout", "pointwise_kernels", "rewrites", "capture")
    if failure.stage == "rewrite":
        return plain.without("layout", "pointwise_kernels", "rewrites")
    if failure.family and failure.family in config.families:
        return config.without_family(failure.family)
    if config.layout and failure.used_layout:
        return config.without("layout")
    used = failure.used_families & config.families
    if len(used) >= 2 and not failure.verified:
        return config.without_family(next(name for name in DROP_ORDER if name in used))
    if config.families and failure.used_families:
        return plain
    own_forward = plain.without("layout", "pointwise_kernels", "rewrites", "capture")
    if config.pointwise_kernels and failure.used_kernels:
        if (failure.verified or failure.token) and not failure.rewrites_saved:
            return own_forward  # torch calls of eager's own ops, or of ops no rewrite made cheaper: no faster
        return plain.without("layout", "pointwise_kernels")
    if config.rewrites and failure.rewrites_fired and not failure.verified:
        return plain.without("layout", "pointwise_kernels", "rewrites")
    return own_forward


def second_opinion(config: OptimizeConfig, used_families: frozenset[str]) -> OptimizeConfig | None:
    """The plan to measure beside a verified plan that ran slower than torch.compile: the same without the matrix
    families it used (their anchors back to cuDNN and cuBLAS, the other kernels kept). None where it used none, or
    where every kernel was asked for (`--every-kernel` tests the kernels, whatever they cost)."""
    matrix = [name for name in MATRIX_FAMILIES if name in used_families & config.families]
    if not matrix or config.every_kernel:
        return None
    for name in matrix:
        config = config.without_family(name)
    return config


def token_kernels(model_ops: Counter, plan: Plan, graph: fx.Graph) -> str | None:
    """Why the plan's kernels do none of the model's work (None where they do some): every op of the model as
    captured still runs as a torch call of the plan, so its kernels compute only ops the rewrites split off (a
    convolution's bias add): a build, and nothing of the model's own computation."""
    if not plan.groups or not model_ops:
        return None
    by_name = {n.name: n for n in graph.nodes}
    torch_ops = Counter(str(by_name[s.node].target) for s in plan.steps if not isinstance(s, KernelStep))
    if any(torch_ops[op] < count for op, count in model_ops.items()):
        return None
    kernels = ", ".join(g.name for g in plan.groups)
    return (f"every op of the model stays a torch call ({', '.join(sorted(model_ops))}); the kernels ({kernels}) "
            "compute only what the rewrites split off: torch calls instead")
