"""Imports point from the edges towards the core: each part imports only the parts its row allows.

Units are the top-level packages `runtime_patches` and `evaluation`, and each first-level module or
subpackage of `mars_openhands`. Every import counts, including those inside functions. Inside and
across units, no two project modules may import each other, directly or in a circle.
"""
from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mars_openhands", "runtime_patches", "evaluation")


def _mars(*names: str) -> set[str]:
    return {f"mars_openhands.{n}" for n in names}


#: unit -> the units it may import (besides itself).
ALLOWED: dict[str, set[str]] = {
    "mars_openhands": set(),
    "mars_openhands.events": set(),
    "mars_openhands.protocol": set(),
    "mars_openhands.results": set(),
    "mars_openhands.stopping": set(),
    "mars_openhands.procs": set(),
    "mars_openhands.hints": set(),
    "mars_openhands.run_folder": _mars("hints"),
    "mars_openhands.repeats": _mars("core"),
    "mars_openhands.core": _mars("events"),
    "mars_openhands.workload": _mars("events"),
    "mars_openhands.metrics": _mars("core", "results"),
    "mars_openhands.plots": _mars("results", "metrics"),
    "mars_openhands.sim": _mars("core", "events", "results", "metrics", "workload"),
    "mars_openhands.vllm": _mars("core", "events", "procs", "protocol", "stopping"),
    # the agent-neutral client: any agent's side of the protocol
    "mars_openhands.client": _mars("events", "protocol"),
    "mars_openhands.openhands": _mars("client", "events", "protocol", "workload"),
    "mars_openhands.cli_args": _mars("core", "workload"),
    "mars_openhands.replay": _mars("cli_args", "cluster", "core", "events", "metrics", "plots", "procs", "protocol",
                                   "repeats", "results", "run_folder", "sim", "vllm", "vsim", "workload"),
    "mars_openhands.matrix": _mars("cli_args", "core", "events", "hints", "metrics", "plots", "results",
                                   "run_folder", "sim", "workload"),
    "mars_openhands.report": _mars("metrics", "openhands", "plots", "results", "sim", "workload"),
    "mars_openhands.cli": _mars("cli_args", "cluster", "core", "hints", "matrix", "metrics", "plots", "results",
                                "run_folder", "sim", "vsim", "workload"),
    "mars_openhands.cluster": _mars("core", "procs", "protocol", "stopping", "vllm"),
    # vLLM's own scheduler on the simulator's clock: a room above both engines
    "mars_openhands.vsim": _mars("core", "events", "results", "sim", "vllm", "workload"),
    # the edges: patches build on the OpenHands integration; the evaluation may use anything
    "runtime_patches": _mars("openhands"),
    "evaluation": {"runtime_patches"},
}
ALLOWED["evaluation"] |= {u for u in ALLOWED if u.startswith("mars_openhands")}


def unit_of(module: str) -> str | None:
    """The unit a dotted module name belongs to (None: not part of this project)."""
    parts = module.split(".")
    if parts[0] not in PACKAGES:
        return None
    return ".".join(parts[:2]) if parts[0] == "mars_openhands" and len(parts) > 1 else parts[0]


def _is_package_module(path: Path) -> bool:
    """A file importable as part of a package (task repos under evaluation/ are not)."""
    return all((d / "__init__.py").is_file() for d in path.relative_to(ROOT).parents if d != Path("."))


def project_modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the three packages."""
    found = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if _is_package_module(path):
                parts = path.relative_to(ROOT).with_suffix("").parts
                found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(module: str, path: Path) -> list[tuple[str, int]]:
    """(imported module, line) for every import statement in the file, relative ones resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # `from pkg import name` may name a submodule: count both
            out += [(base, node.lineno)] + [(f"{base}.{a.name}", node.lineno) for a in node.names]
    return out


def violations() -> list[str]:
    """`file:line: unit -> unit` for each import the table does not allow."""
    found: list[str] = []
    for module, path in project_modules().items():
        src = unit_of(module)
        for target, line in imports_of(module, path):
            dst = unit_of(target)
            if dst is None or dst == src or target == "mars_openhands":  # its __init__ is empty
                continue
            entry = f"{path.relative_to(ROOT)}:{line}: {src} -> {dst}"
            if dst not in ALLOWED.get(src, set()) and entry not in found:
                found.append(entry)
    return found


def module_graph() -> dict[str, set[str]]:
    """Project module -> the project modules it imports (every import counts)."""
    modules = project_modules()
    return {m: {t for t, _ in imports_of(m, p) if t in modules and t != m} for m, p in modules.items()}


def import_cycle() -> list[str]:
    """One circle of modules importing each other (first = last), [] when there is none."""
    try:
        TopologicalSorter(module_graph()).prepare()
    except CycleError as e:
        return list(e.args[1])
    return []


def test_every_unit_has_a_row():
    units = {unit_of(m) for m in project_modules()}
    assert units - set(ALLOWED) == set(), "place the new part in ALLOWED"
    assert {"mars_openhands.core", "mars_openhands.replay", "runtime_patches"} <= units


def test_imports_follow_the_table():
    assert violations() == []


def test_the_table_has_no_cycle():
    try:
        order = list(TopologicalSorter(ALLOWED).static_order())
    except CycleError as e:
        pytest.fail(f"allowed imports form a cycle: {e.args[1]}")
    assert order.index("mars_openhands.core") < order.index("mars_openhands.sim") < order.index("evaluation")


def test_no_modules_import_each_other():
    assert import_cycle() == []


def test_an_import_cycle_is_reported(tmp_path, monkeypatch):
    """The scan itself: a circle closed by an import inside a function is caught."""
    pkg = tmp_path / "mars_openhands"
    (pkg / "vllm").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "vllm" / "__init__.py").write_text("")
    (pkg / "vllm" / "a.py").write_text("from mars_openhands.vllm.b import B\n")
    (pkg / "vllm" / "b.py").write_text("def f():\n    from .a import A\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    assert sorted(set(import_cycle())) == ["mars_openhands.vllm.a", "mars_openhands.vllm.b"]


def test_an_import_cycle_at_the_edges_is_reported(tmp_path, monkeypatch):
    """The scan covers the edges too: two evaluation modules importing each other are caught."""
    pkg = tmp_path / "evaluation" / "swebench"
    pkg.mkdir(parents=True)
    (tmp_path / "evaluation" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("import evaluation.swebench.b\n")
    (pkg / "b.py").write_text("from . import a\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    assert sorted(set(import_cycle())) == ["evaluation.swebench.a", "evaluation.swebench.b"]


def test_mars_openhands_never_imports_the_edges():
    edges = [(m, t, line) for m, p in project_modules().items() if m.startswith("mars_openhands")
             for t, line in imports_of(m, p) if t.split(".")[0] in ("runtime_patches", "evaluation")]
    assert edges == []


def test_a_forbidden_import_is_reported(tmp_path, monkeypatch):
    """The scan itself: a relative import inside a function from core into the simulator is caught."""
    pkg = tmp_path / "mars_openhands"
    (pkg / "core").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "__init__.py").write_text("")
    (pkg / "core" / "bad.py").write_text("def f():\n    from ..sim import engine\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    assert violations() == ["mars_openhands/core/bad.py:2: mars_openhands.core -> mars_openhands.sim"]
