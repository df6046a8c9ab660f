"""`evaluation/swebench` is layered: its parts import downwards, with at most one arrow back up.

A part is a subfolder (`agents`, `grading`, `runs`, `taskrepo`, `workspaces`) or a module at the
package top (`records`, `git`, `inputs`, `modes`, `evaluate`, `run`, `demo`). `LAYERS` lists them
from the bottom up; every import counts, including those inside functions (the scan of
`test_imports.py`).
"""
from __future__ import annotations

from graphlib import CycleError, TopologicalSorter

import pytest

from tests import test_imports as scan

PACKAGE = "evaluation.swebench"
#: From the bottom up: a part may import the parts before it.
LAYERS = ("records", "git", "workspaces", "inputs", "agents", "grading", "taskrepo", "runs", "modes",
          "evaluate", "run", "demo")
#: The most imports from a part into a later one that the layering tolerates.
MAX_UPWARD = 1


def part_of(module: str) -> str | None:
    """The part a module belongs to (None: outside the package, or the package's own __init__)."""
    if not module.startswith(PACKAGE + "."):
        return None
    return module[len(PACKAGE) + 1:].split(".")[0]


def part_arrows() -> dict[tuple[str, str], list[str]]:
    """(importing part, imported part) -> `file:line` of each import between two parts."""
    modules = scan.project_modules()
    arrows: dict[tuple[str, str], list[str]] = {}
    for module, path in modules.items():
        src = part_of(module)
        for target, line in scan.imports_of(module, path):
            dst = part_of(target)
            if src is None or dst is None or dst == src or target not in modules:
                continue
            where = f"{path.relative_to(scan.ROOT)}:{line}"
            if where not in arrows.setdefault((src, dst), []):
                arrows[(src, dst)].append(where)
    return arrows


def upward(arrows: dict[tuple[str, str], list[str]]) -> list[str]:
    """Each import from a part into one above it: `file:line: part -> part`."""
    return [f"{where}: {src} -> {dst}" for (src, dst), places in sorted(arrows.items())
            if LAYERS.index(dst) > LAYERS.index(src) for where in places]


def part_cycle(arrows: dict[tuple[str, str], list[str]]) -> list[str]:
    """One circle of parts importing each other (first = last), [] when there is none."""
    graph: dict[str, set[str]] = {}
    for src, dst in arrows:
        graph.setdefault(src, set()).add(dst)
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as e:
        return list(e.args[1])
    return []


def test_every_part_has_a_layer():
    parts = {p for m in scan.project_modules() if (p := part_of(m)) is not None}
    assert parts - set(LAYERS) == set(), "place the new part in LAYERS"
    assert set(LAYERS) - parts == set(), "LAYERS names a part that no longer exists"


def test_parts_import_downwards():
    found = upward(part_arrows())
    assert len(found) <= MAX_UPWARD, "imports back up:\n" + "\n".join(found)


def test_no_parts_import_each_other():
    assert part_cycle(part_arrows()) == []


def test_an_upward_import_and_a_part_cycle_are_reported(tmp_path, monkeypatch):
    """The scan itself: `grading` importing `runs` (above it) inside a function is an arrow back up,
    and with `runs` importing `grading` the two form a circle."""
    pkg = tmp_path / "evaluation" / "swebench"
    for part in ("grading", "runs"):
        (pkg / part).mkdir(parents=True)
        (pkg / part / "__init__.py").write_text("")
    (tmp_path / "evaluation" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "grading" / "grade.py").write_text("def f():\n    from ..runs import outcomes\n")
    (pkg / "runs" / "outcomes.py").write_text("from evaluation.swebench.grading.grade import f\n")
    monkeypatch.setattr(scan, "ROOT", tmp_path)
    arrows = part_arrows()
    assert upward(arrows) == ["evaluation/swebench/grading/grade.py:2: grading -> runs"]
    assert sorted(set(part_cycle(arrows))) == ["grading", "runs"]


@pytest.mark.parametrize("module, part", [("evaluation.swebench.runs.driver", "runs"),
                                          ("evaluation.swebench.git", "git"), ("evaluation.swebench", None),
                                          ("mars_openhands.core.policy", None)])
def test_part_of(module, part):
    assert part_of(module) == part
