import pytest

from depgraph import CycleError, Graph, levels, toposort

DIAMOND = {"app": ["web", "db"], "web": ["core"], "db": ["core"], "core": []}


def test_toposort_diamond():
    assert toposort(Graph(DIAMOND)) == ["core", "db", "web", "app"]


def test_toposort_ties_by_name():
    assert toposort(Graph({"b": [], "a": [], "c": []})) == ["a", "b", "c"]


def test_levels_diamond():
    assert levels(Graph(DIAMOND)) == [["core"], ["db", "web"], ["app"]]


def test_cycle_is_reported_with_its_path():
    with pytest.raises(CycleError) as info:
        toposort(Graph({"a": ["b"], "b": ["c"], "c": ["a"]}))
    assert info.value.cycle == ["a", "b", "c", "a"]


def test_self_dependency_is_a_cycle():
    with pytest.raises(CycleError, match="x -> x"):
        levels(Graph({"x": ["x"]}))
