"""Orderings of a graph (Kahn's algorithm, deterministic by name)."""

from __future__ import annotations

import heapq

from depgraph.errors import CycleError
from depgraph.graph import Graph


def _find_cycle(remaining: dict[str, set[str]]) -> list[str]:
    """Walk unresolved dependencies from the smallest node until one repeats."""
    path: list[str] = []
    node = min(remaining)
    while node not in path:
        path.append(node)
        node = min(remaining[node])
    return path[path.index(node):] + [node]


def _indegrees(graph: Graph) -> dict[str, set[str]]:
    return {node: graph.dependencies(node) for node in graph.nodes()}


def toposort(graph: Graph) -> list[str]:
    """Every node after all of its dependencies; among ready nodes, by name."""
    pending = _indegrees(graph)
    ready = [n for n, deps in pending.items() if not deps]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        node = heapq.heappop(ready)
        order.append(node)
        del pending[node]
        for other, deps in pending.items():
            if node in deps:
                deps.discard(node)
                if not deps:
                    heapq.heappush(ready, other)
    if pending:
        raise CycleError(_find_cycle(pending))
    return order


def levels(graph: Graph) -> list[list[str]]:
    """Nodes grouped into waves; each wave depends only on earlier waves."""
    pending = _indegrees(graph)
    waves: list[list[str]] = []
    while pending:
        wave = sorted(n for n, deps in pending.items() if not deps)
        if not wave:
            raise CycleError(_find_cycle(pending))
        waves.append(wave)
        for node in wave:
            del pending[node]
        for deps in pending.values():
            deps.difference_update(wave)
    return waves
