"""The defaults of the optional hooks of a kernel family (`plan.Family`): a family overrides what it needs."""

from __future__ import annotations

from ..plan import KernelGroup, Runtime


class FamilyBase:
    notes_stand = False

    def not_pointwise_note(self, node) -> str | None:
        return None

    def runtime(self) -> Runtime:
        return Runtime((), ())

    def check_operands(self, group: KernelGroup, inputs: dict) -> None:
        return None

    def references(self, group: KernelGroup) -> dict:
        return {}  # every member runs as the graph's own op

    def why_torch(self, node, on: bool) -> str | None:
        return None

    def fusion(self, group: KernelGroup, ops: str, count: int, saved: str) -> str | None:
        return None

    def how(self) -> list[str]:
        return []

    def expected(self) -> list[str]:
        return []

    def seconds(self, group: KernelGroup, by_name) -> float | None:
        return None

    def reads_channels_last(self, group: KernelGroup, value: str, by_name) -> bool:
        return False
