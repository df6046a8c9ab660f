"""What a vLLM release offers the adapter, read from that release's own source without importing it.

`internals.REQUIRED` names the private methods and call sites the scheduler adapter relies on. A
release's fingerprint records, for each of them and for a few more that changed between releases
(`WATCHED_METHODS`, `WATCHED_ATTRIBUTES`), what its source has: the class that defines a method
(following base classes as `getattr` does) and its parameters, whether a call-site snippet is in
its method, and whether a class (or a base) sets an attribute on `self`. A GPU wheel cannot be
imported on a CPU host, so the source is parsed, not imported. The fingerprints of the verified
releases are checked in (`vllm_fingerprints.json`, written by `scripts/vllm_fingerprint.py`), and
the tests check the guard against each one (`guard_problems`).
"""
from __future__ import annotations

import ast
import json
import re
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mars_openhands.vllm.release.internals import REQUIRED, CalledFrom, Internal
from mars_openhands.vllm.release.version import FINGERPRINTS

_SCHED = "vllm.v1.core.sched.scheduler.Scheduler"
_ASYNC = "vllm.v1.core.sched.async_scheduler.AsyncScheduler"

#: Methods recorded beyond those the guard requires: where releases differ in what MARS inherits.
WATCHED_METHODS: tuple[tuple[str, str], ...] = (
    ("vllm.v1.core.sched.interface.SchedulerInterface", "has_request"),
    (_SCHED, "has_request"),
    (_ASYNC, "_update_request_with_output"),
    (_ASYNC, "_update_after_schedule"),
)

#: Attributes the adapter reads on a built scheduler (`internals._instance_problems`) or that
#: releases dropped.
WATCHED_ATTRIBUTES: tuple[tuple[str, str], ...] = (
    (_SCHED, "running"), (_SCHED, "waiting"), (_SCHED, "kv_holding_waiting"),
    (_SCHED, "requests"), (_SCHED, "kv_cache_manager"),
    ("vllm.v1.core.kv_cache_manager.KVCacheManager", "coordinator"),
    ("vllm.v1.core.kv_cache_manager.KVCacheManager", "block_pool"),
    ("vllm.v1.core.kv_cache_coordinator.KVCacheCoordinator", "single_type_managers"),
    ("vllm.v1.core.single_type_kv_cache_manager.SingleTypeKVCacheManager", "req_to_blocks"),
    ("vllm.v1.core.block_pool.BlockPool", "num_gpu_blocks"),
    (_ASYNC, "_spec_token_placeholders"),
)

Reader = Callable[[str], "str | None"]     # path inside the tree, e.g. "vllm/_version.py" -> text


class FingerprintError(ValueError):
    """The given wheel or source tree is not a readable vLLM release."""


@dataclass
class _Class:
    module: str
    node: ast.ClassDef
    source: str
    imports: dict[str, str]              # local name -> dotted path it was imported from


class _Tree:
    """The modules of one vLLM tree, parsed on demand, with classes resolved across imports."""

    def __init__(self, read: Reader) -> None:
        self.read = read
        self._modules: dict[str, tuple[str, ast.Module] | None] = {}

    def _module(self, module: str) -> tuple[str, ast.Module] | None:
        if module not in self._modules:
            base = module.replace(".", "/")
            text = self.read(base + ".py")
            if text is None:
                text = self.read(base + "/__init__.py")
            self._modules[module] = None if text is None else (text, ast.parse(text))
        return self._modules[module]

    def find_class(self, dotted: str) -> _Class | None:
        module, _, name = dotted.rpartition(".")
        parsed = self._module(module)
        if parsed is None:
            return None
        source, tree = parsed
        imports = {a.asname or a.name: f"{node.module}.{a.name}"
                   for node in tree.body if isinstance(node, ast.ImportFrom) and node.module
                   for a in node.names}
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return _Class(module, node, source, imports)
        if name in imports:                   # re-exported from another module
            return self.find_class(imports[name])
        return None

    def lineage(self, dotted: str) -> Iterator[tuple[str, _Class]]:
        """The class, then its bases depth-first (the order `getattr` finds a method in, for the
        single-inheritance chains recorded here)."""
        cls = self.find_class(dotted)
        if cls is None:
            return
        yield f"{cls.module}.{cls.node.name}", cls
        for base in cls.node.bases:
            name = ast.unparse(base)
            target = cls.imports.get(name.split(".")[0]) if "." not in name else None
            if "." not in name and target is None:
                target = f"{cls.module}.{name}"
            if target is not None and target.startswith("vllm."):
                yield from self.lineage(target)


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = fn.args
    names = [p.arg for p in (*a.posonlyargs, *a.args)]
    names += [a.vararg.arg] if a.vararg else []
    names += [p.arg for p in a.kwonlyargs]
    names += [a.kwarg.arg] if a.kwarg else []
    return [n for n in names if n != "self"]


def _method(tree: _Tree, owner: str, name: str) -> tuple[str, ast.FunctionDef | ast.AsyncFunctionDef,
                                                          str] | None:
    for where, cls in tree.lineage(owner):
        for node in cls.node.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return where, node, cls.source
    return None


def _sets_attribute(tree: _Tree, owner: str, attr: str) -> bool:
    for _, cls in tree.lineage(owner):
        for node in ast.walk(cls.node):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets = [node.target]
            for t in targets:
                if (isinstance(t, ast.Attribute) and t.attr == attr
                        and isinstance(t.value, ast.Name) and t.value.id == "self"):
                    return True
    return False


def _version(read: Reader) -> str:
    text = read("vllm/_version.py")
    found = re.search(r"""__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", text or "")
    if found is None:
        raise FingerprintError("no vllm/_version.py with a __version__: not a vLLM release tree")
    return found.group(1).split("+", 1)[0]


def fingerprint(read: Reader) -> tuple[str, dict[str, Any]]:
    """(release version, fingerprint) of the vLLM tree that `read` serves."""
    version = _version(read)
    tree = _Tree(read)
    methods: dict[str, Any] = {}
    wanted = [(r.owner, r.name) for r in REQUIRED if isinstance(r, Internal)]
    wanted += [(r.owner, r.method) for r in REQUIRED if isinstance(r, CalledFrom)]
    for owner, name in [*wanted, *WATCHED_METHODS]:
        found = _method(tree, owner, name)
        methods[f"{owner}.{name}"] = (None if found is None
                                      else {"defined_in": found[0], "params": _params(found[1])})
    call_sites: dict[str, bool] = {}
    for r in REQUIRED:
        if isinstance(r, CalledFrom):
            found = _method(tree, r.owner, r.method)
            body = ast.get_source_segment(found[2], found[1]) if found else None
            call_sites[_site_key(r)] = bool(body) and r.snippet in (body or "")
    attributes = {f"{owner}.{attr}": _sets_attribute(tree, owner, attr)
                  for owner, attr in WATCHED_ATTRIBUTES}
    return version, {"methods": methods, "call_sites": call_sites, "attributes": attributes}


def _site_key(site: CalledFrom) -> str:
    return f"{site.owner}.{site.method}: {site.snippet}"


def read_wheel(path: Path) -> Reader:
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as e:
        raise FingerprintError(f"{path} is not a readable wheel: {e}") from None
    names = set(archive.namelist())
    return lambda name: archive.read(name).decode() if name in names else None


def read_source(root: Path) -> Reader:
    """`root` is a checkout (holding `vllm/`) or an installed `vllm` package directory."""
    if not (root / "vllm" / "__init__.py").is_file():
        if (root / "__init__.py").is_file() and root.name == "vllm":
            root = root.parent
        else:
            raise FingerprintError(f"{root} holds no vllm/ package")

    def read(name: str) -> str | None:
        file = root / name
        return file.read_text() if file.is_file() else None
    return read


def load(path: Path = FINGERPRINTS) -> dict[str, dict[str, Any]]:
    """Release version -> fingerprint, as checked in."""
    return dict(json.loads(path.read_text()))


def guard_problems(fp: dict[str, Any]) -> list[str]:
    """What `internals.REQUIRED` expects that the release of fingerprint `fp` does not offer."""
    problems = []
    for r in REQUIRED:
        if isinstance(r, Internal):
            method = fp["methods"].get(f"{r.owner}.{r.name}")
            if method is None:
                problems.append(f"{r.owner}.{r.name} is missing")
            elif tuple(method["params"][:len(r.params)]) != r.params:
                problems.append(f"{r.owner}.{r.name} takes ({', '.join(method['params'])}), "
                                f"the adapter passes ({', '.join(r.params)})")
        elif r.since_method and fp["methods"].get(f"{r.owner}.{r.method}") is None:
            continue
        elif not fp["call_sites"].get(_site_key(r), False):
            problems.append(f"{r.owner}.{r.method} no longer calls `{r.snippet}`")
    problems += [f"{name} is never set" for name, present in fp["attributes"].items()
                 if not present and not name.startswith(_ASYNC)]
    return problems
