"""The graph: each node maps to the nodes it depends on."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class Graph:
    def __init__(self, deps: Mapping[str, Iterable[str]] | None = None) -> None:
        self._deps: dict[str, set[str]] = {}
        for node, requires in (deps or {}).items():
            self.add(node, *requires)

    def add(self, node: str, *requires: str) -> None:
        """Declare ``node`` (again) and add dependencies to it."""
        self._deps.setdefault(node, set()).update(requires)

    def nodes(self) -> list[str]:
        """Declared nodes, sorted."""
        return sorted(self._deps)

    def dependencies(self, node: str) -> set[str]:
        return set(self._deps.get(node, ()))

    def dependents(self, node: str) -> set[str]:
        return {n for n, reqs in self._deps.items() if node in reqs}
