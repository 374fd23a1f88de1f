"""The plan: what partition decides and every later stage reads (codegen, emit, the CPU check, report, cost).

Plain dataclasses; this module imports no stage.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import fx

KERNEL_DTYPES = (torch.float32, torch.bool)


@dataclass(frozen=True)
class Claim:
    """What partition hands a family's claim besides the pointwise groups and the notes so far."""

    graph: fx.Graph
    reach: Any  # descendant sets of every node: `reach.convex(members)`, `reach.below[name]`
    claimed: frozenset[str]  # members of the groups of the families that claimed before
    torch_reason: Callable[[fx.Node], str | None]  # why a node is not a pointwise kernel op (None: it is one)
    every_kernel: bool = False  # every anchor a kernel can take is that kernel, whatever the cost model expects


@dataclass(frozen=True)
class Runtime:
    """A family's fixed C++: text for the kernel unit and for the binding unit, and extra nvcc flags."""

    cuda: tuple[str, ...]
    binding: tuple[str, ...]
    nvcc_flags: tuple[str, ...] = ()


class Family(Protocol):
    """A kernel family: the anchors it recognises, how it grows a kernel group around each, and how that
    group's kernel is written, checked in float64, priced and explained. The shared stages reach a family
    through `KernelGroup.family` or the list of families they are handed, never by name. The registry,
    `fuseforge.families.FAMILIES`, lists the families in the order they claim; `families/base.py` gives the
    defaults of the optional hooks."""

    name: str  # its folder under fuseforge/families/ and the kind of its groups
    summary: str  # what its kernels hold, for the help of its command-line switch
    flag: str  # that switch, which turns the family off (`families/base.py`: `--no-<name>`, with dashes)
    notes_stand: bool  # its not-fused notes about the edges of its groups stand, whatever later families note
    order: int  # its place among the families in the generated translation units and the report

    def claim(self, claim: Claim, pointwise_groups: list[list[str]],
              not_fused: list[WhyNotFused]) -> tuple[list[list[str]], list[tuple[set[str], Any]]]:
        """Grow this family's groups from `pointwise_groups`: returns (the pointwise groups left,
        [(members, spec)]); `not_fused` is updated with the family's own notes about its groups' edges."""
        ...

    def claim_first(self, claim: Claim, pointwise_groups: list[list[str]],
                    not_fused: list[WhyNotFused]) -> tuple[list[list[str]], list[tuple[set[str], Any]]]:
        """Like `claim`, before any family's `claim` (in the registry's order): the groups this family must form
        before earlier families take their ops (an earlier family's kernel would take the anchor's tail and leave
        the anchor to a torch call). Their anchors are in `Claim.claimed` for every claim after."""
        ...

    def not_pointwise_note(self, node: fx.Node) -> str | None:
        """For a node of the family's table that cannot be its kernel, what the not-fused notes add to
        "is not pointwise, nor ..." (None: nothing)."""
        ...

    def describe(self, group: KernelGroup) -> list[str]:
        """The group's lines in `20_partition.txt`, after its `kernel` line."""
        ...

    def source(self, group: KernelGroup, by_name: dict[str, fx.Node]):
        """The group's generated C++ (`codegen.pointwise_kernel.KernelSource`)."""
        ...

    def runtime(self) -> Runtime:
        """The fixed C++ every kernel of the family needs, included once where the plan has one."""
        ...

    def runtime_for(self, groups: list[KernelGroup]) -> Runtime:
        """The fixed C++ the family's groups of one plan need (a family whose kernels differ in what they need)."""
        ...

    def measure_on_gpu(self, graph: fx.Graph, out_dir: Any) -> list[str]:
        """What its claim needs measured on the GPU, taken before partitioning where there is one (recorded on
        the graph's nodes); notes for the report."""
        ...

    def check_operands(self, group: KernelGroup, inputs: dict[str, Any]) -> None:
        """Raise ValueError where an input does not fit the class the kernel reads it as (what the binding checks)."""
        ...

    def references(self, group: KernelGroup) -> dict[str, Callable[[dict[str, Any]], Any]]:
        """The float64 formulas of the kernel, by the member they compute (from the values computed so far);
        the group's other members run as the graph's own ops."""
        ...

    def call_comment(self, group: KernelGroup) -> str:
        """What the call in ModelNew.forward runs, for its comment."""
        ...

    def why_torch(self, node: fx.Node, on: bool) -> str | None:
        """The report's reason a node of the family's table stays a torch call (`on`: the family is turned
        on); None where the family has nothing to say."""
        ...

    def replaced(self, group: KernelGroup) -> tuple[str, str]:
        """The report's name of the group's kernel, and what it computes and why that pays (one clause)."""
        ...

    def launches(self, group: KernelGroup) -> int:
        """How many kernels the group's call launches (the cost model's and the report's count)."""
        ...

    def fusion(self, group: KernelGroup, ops: str, count: int, saved: str) -> str | None:
        """The report's line on what the group's fusion saves (None: the pointwise kernels' line)."""
        ...

    def how(self) -> list[str]:
        """The report's sentence on how the family's kernels work (the general description: docs/kernels.md)."""
        ...

    def how_for(self, groups: list[KernelGroup]) -> list[str]:
        """`how()` for the family's groups of one plan (a family whose kernels differ says only the used ones')."""
        ...

    def call_shape(self, group: KernelGroup) -> str:
        """The report's summary of one call: the shapes it works on and its operands' classes."""
        ...

    def expected(self) -> list[str]:
        """Clauses the report adds to the reason for the expected speedup where the plan uses the family."""
        ...

    def expected_for(self, groups: list[KernelGroup]) -> list[str]:
        """`expected()` for the family's groups of one plan."""
        ...

    def seconds(self, group: KernelGroup, by_name: dict[str, fx.Node]) -> float | None:
        """The cost model's time of the group's kernel (None: memory-bound, priced by its traffic)."""
        ...

    def reads_channels_last(self, group: KernelGroup, value: str, by_name: dict[str, fx.Node]) -> bool:
        """Whether the group's kernel takes `value` channels-last (so a convolution writing it may run so)."""
        ...


@dataclass(frozen=True)
class KernelGroup:
    """Ops computed by one generated kernel: pointwise ops, or a kernel family's anchor and its neighbours."""

    name: str
    nodes: tuple[str, ...]  # in topological order
    inputs: tuple[str, ...]  # external tensors read (float32), in first-use order
    outputs: tuple[str, ...]  # tensors written: of shape `shape` (a family's kernel: or of its own shapes)
    shape: tuple  # iteration shape (a family's kernel: its spec's full shape) as captured; may hold symbolic sizes
    family: Family | None = None  # the kernel family whose kernel computes the group (None: a pointwise kernel)
    spec: Any = None  # the family's description of the group: its anchor, its operands' classes, ...

    @property
    def kind(self) -> str:
        """The name of the group's kernel family, or `pointwise`."""
        return self.family.name if self.family is not None else "pointwise"


@dataclass(frozen=True)
class TorchStep:
    node: str


@dataclass(frozen=True)
class KernelStep:
    group: KernelGroup


@dataclass(frozen=True)
class WhyNotFused:
    producer: str
    consumer: str
    reason: str


@dataclass
class Plan:
    steps: list[TorchStep | KernelStep]
    groups: list[KernelGroup]
    not_fused: list[WhyNotFused] = field(default_factory=list)
    channels_last: frozenset[str] = frozenset()  # convolutions run channels-last (set by `layout`)
