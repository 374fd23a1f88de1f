"""What kernel families share: the defaults of the optional hooks of `plan.Family` (a family overrides what it
needs), and the operand class of an input read per channel."""

from __future__ import annotations

import dataclasses

from ..plan import KernelGroup, Runtime


class FamilyBase:
    notes_stand = False

    @property
    def flag(self) -> str:
        """The command-line switch that turns the family off: `--no-<name>`, with dashes."""
        return "--no-" + self.name.replace("_", "-")

    def claim_first(self, claim, pointwise_groups, not_fused):
        return pointwise_groups, []  # no group before the families' claims

    def not_pointwise_note(self, node) -> str | None:
        return None

    def runtime(self) -> Runtime:
        return Runtime((), ())

    def measure_on_gpu(self, graph, out_dir) -> list[str]:
        """Measurements the family's claim needs, taken on the GPU before partitioning where there is one (they go
        on the graph's nodes); returns notes for the report (a measurement that failed, and what that means)."""
        return []

    def assume_unmeasured(self, graph) -> list[str]:
        """Without a GPU, under `--every-kernel`: stand-ins for what `measure_on_gpu` would measure, chosen so that
        every kernel the family has is planned and its code generated and checked on the CPU (never on a GPU run,
        which measures); returns notes for the report that say what was assumed."""
        return []

    def runtime_for(self, groups: list[KernelGroup]) -> Runtime:
        """The fixed C++ the family's `groups` of one plan need (by default all of `runtime()`)."""
        return self.runtime()

    def check_operands(self, group: KernelGroup, inputs: dict) -> None:
        return None

    def references(self, group: KernelGroup) -> dict:
        return {}  # every member runs as the graph's own op

    def why_torch(self, node, on: bool) -> str | None:
        return None

    def launches(self, group: KernelGroup) -> int:
        return 1

    def fusion(self, group: KernelGroup, ops: str, count: int, saved: str) -> str | None:
        return None

    def how(self) -> list[str]:
        return []

    def how_for(self, groups: list[KernelGroup]) -> list[str]:
        """`how()` for the family's `groups` of one plan (a family whose kernels differ says only the used ones')."""
        return self.how()

    def expected(self) -> list[str]:
        return []

    def expected_for(self, groups: list[KernelGroup]) -> list[str]:
        """`expected()` for the family's `groups` of one plan."""
        return self.expected()

    def seconds(self, group: KernelGroup, by_name) -> float | None:
        return None

    def reads_channels_last(self, group: KernelGroup, value: str, by_name) -> bool:
        return False


class EpilogueOperands:
    """What a frozen spec dataclass with `operands` ((epilogue input, class) pairs) answers about them (the GEMM
    and conv families' specs)."""

    def operand_class(self, name: str) -> str | None:
        return dict(self.operands).get(name)

    def with_operand_order(self, inputs: tuple[str, ...]):
        """The epilogue's operands in the order of the inputs (the main loop's operands have no class)."""
        return dataclasses.replace(self, operands=tuple((i, self.operand_class(i)) for i in inputs
                                                        if self.operand_class(i)))


def operand_class(shape: tuple, full: tuple) -> str | None:
    """How an input of `shape` broadcasts against F = [N, C, ...]: full, channel (C at axis 1 only) or scalar."""
    if shape == full:
        return "full"
    if all(d == 1 for d in shape):
        return "scalar"
    if len(shape) > len(full):
        return None
    padded = (1,) * (len(full) - len(shape)) + tuple(shape)
    if padded[1] == full[1] and all(d == 1 for i, d in enumerate(padded) if i != 1):
        return "channel"
    return None


def broadcasts_to(shape: tuple, full: tuple) -> bool:
    """Whether a value of `shape` broadcasts to `full` (one value per element of `full` after broadcasting)."""
    if len(shape) > len(full):
        return False
    padded = (1,) * (len(full) - len(shape)) + tuple(shape)
    return all(d == 1 or d == f for d, f in zip(padded, full))
