"""Errors carrying enough context to fix the graph."""

from __future__ import annotations


class CycleError(ValueError):
    """The graph has a cycle; ``cycle`` lists it, first node repeated at the end."""

    def __init__(self, cycle: list[str]) -> None:
        super().__init__("dependency cycle: " + " -> ".join(cycle))
        self.cycle = cycle
