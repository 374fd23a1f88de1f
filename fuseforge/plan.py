"""The plan: what partition decides and every later stage reads (codegen, emit, the CPU check, report, cost).

Plain dataclasses; this module imports no stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .partition_channel_reductions import ChannelReduceSpec
    from .partition_channels import ChannelSpec
    from .partition_gemm import GemmSpec
    from .partition_rows import RowSpec

KERNEL_DTYPES = (torch.float32, torch.bool)


@dataclass(frozen=True)
class KernelGroup:
    """Ops computed by one generated kernel: pointwise ops, or (with `row`) a row reduction and its neighbours."""

    name: str
    nodes: tuple[str, ...]  # in topological order
    inputs: tuple[str, ...]  # external tensors read (float32), in first-use order
    outputs: tuple[str, ...]  # tensors written: of shape `shape` (row kernels: or one value per row)
    shape: tuple  # iteration shape (row kernels: the row shape) as captured; may hold symbolic sizes
    row: RowSpec | None = None  # set for a row kernel
    channel: ChannelSpec | None = None  # set for a channel kernel pair (shape: the norm's input shape)
    gemm: GemmSpec | None = None  # set for a GEMM kernel (shape: the GEMM's output shape)
    channel_reduce: ChannelReduceSpec | None = None  # set for a channel-reduction kernel (shape: the reduced tensor's)

    @property
    def kind(self) -> str:
        if self.gemm is not None:
            return "gemm"
        if self.channel_reduce is not None:
            return "channel-reduction" if self.channel_reduce.reduction else "pool"
        return "row" if self.row is not None else "channel" if self.channel is not None else "pointwise"

    @property
    def family(self) -> str | None:
        """The configuration switch of the kernel family this group belongs to (None: a pointwise kernel)."""
        if self.gemm is not None:
            return "gemm_kernels"
        if self.row is not None:
            return "row_kernels"
        return "channel_kernels" if self.channel is not None or self.channel_reduce is not None else None


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
