"""The plan: what partition decides and every later stage reads (codegen, emit, the CPU check, report, cost).

Plain dataclasses; this module imports no stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import fx

KERNEL_DTYPES = (torch.float32, torch.bool)


class Family(Protocol):
    """A kernel family: the anchors it recognises and how it grows a kernel group around each (`claim`); the
    shared stages reach it through `KernelGroup.family` or the list of families they are handed, never by
    name. The registry, `fuseforge.families.FAMILIES`, lists the families in the order they claim."""

    name: str  # its folder under fuseforge/families/ and the kind of its groups
    switch: str  # the OptimizeConfig field that turns it on
    notes_stand: bool  # its not-fused notes about the edges of its groups stand, whatever later families note

    def claim(self, graph: fx.Graph, pointwise_groups: list[list[str]], not_fused: list[WhyNotFused], reach,
              claimed: set[str]) -> tuple[list[list[str]], list[tuple[set[str], Any]]]:
        """Grow this family's groups from `pointwise_groups` (`claimed`: the members of earlier families'
        groups): returns (the pointwise groups left, [(members, spec)]); `not_fused` is updated with the
        family's own notes about the edges of its groups."""
        ...



@dataclass(frozen=True)
class KernelGroup:
    """Ops computed by one generated kernel: pointwise ops, or a kernel family's anchor and its neighbours."""

    name: str
    nodes: tuple[str, ...]  # in topological order
    inputs: tuple[str, ...]  # external tensors read (float32), in first-use order
    outputs: tuple[str, ...]  # tensors written: of shape `shape` (row kernels: or one value per row)
    shape: tuple  # iteration shape (row kernels: the row shape) as captured; may hold symbolic sizes
    family: Family | None = None  # the kernel family whose kernel computes the group (None: a pointwise kernel)
    spec: Any = None  # the family's description of the group: its anchor, its operands' classes, ...

    def _spec_of(self, name: str):
        return self.spec if self.family is not None and self.family.name == name else None

    @property
    def row(self):
        return self._spec_of("rows")

    @property
    def channel(self):
        return self._spec_of("channel_norms")

    @property
    def gemm(self):
        return self._spec_of("gemm")

    @property
    def channel_reduce(self):
        return self._spec_of("channel_reductions")

    @property
    def kind(self) -> str:
        if self.gemm is not None:
            return "gemm"
        if self.channel_reduce is not None:
            return "channel-reduction" if self.channel_reduce.reduction else "pool"
        return "row" if self.row is not None else "channel" if self.channel is not None else "pointwise"


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
