"""Dependency graphs and their orderings."""

from depgraph.errors import CycleError
from depgraph.graph import Graph
from depgraph.order import levels, toposort

__all__ = ["CycleError", "Graph", "levels", "toposort"]
