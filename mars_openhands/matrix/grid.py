"""The matrix benchmark's grid file (TOML): which cells to run, validated with errors naming the key.

A grid declares its KV and load levels once and lists blocks of cells; each block is the cross
product of its axes, and the grid is the union of its blocks (a cell listed twice runs once)::

    profile = "h200-qwen3-coder-30b"    # simulator profile (KV blocks, cost model, reference host)
    seed = 1                            # trace seed: every cell of a family has the same sessions
    sessions = 120                      # sessions per cell
    [sessions_by_family]                # optional: per-family session counts
    chatty = 80
    [kv]                                # KV capacity: multiplier on the profile's KV blocks
    scarce = 0.25
    nominal = 1.0
    [load]                              # arrival rate: multiple of the reference host's capacity
    light = 0.25
    [[cells]]
    family = ["swe", "long-context"]    # workload families (mars_openhands.workload.families)
    tool_workers = [8, 64]
    kv = ["nominal"]
    load = ["light"]

Load is relative to the *reference host* (the profile's own tool workers and KV blocks), see
`capacity.py`, so one family and load level has one arrival rate, hence one trace, at every
tool-worker count and KV size: those axes vary the resources under the same work.
"""
from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from mars_openhands.sim.profile_file import resolve_profile
from mars_openhands.workload.families import family_names

_TOP = ("profile", "seed", "sessions", "sessions_by_family", "kv", "load", "cells")
_AXES = ("family", "tool_workers", "kv", "load")


class GridError(ValueError):
    """A grid file that cannot be run; the message names the file and the key."""


@dataclass(frozen=True, slots=True)
class Cell:
    family: str
    tool_workers: int
    kv: str                  # level name
    kv_multiplier: float
    load: str                # level name
    load_factor: float
    sessions: int
    seed: int

    @property
    def id(self) -> str:
        return f"{self.family}/w{self.tool_workers}/kv-{self.kv}/{self.load}"


@dataclass(frozen=True, slots=True)
class Grid:
    name: str
    profile: str
    seed: int
    cells: tuple[Cell, ...]


def builtin_grid(name: str) -> Path:
    """Path of a grid shipped with the package (`full`, `quick`)."""
    path = Path(str(resources.files("mars_openhands.matrix") / "grids" / f"{name}.toml"))
    if not path.is_file():
        raise GridError(f"no built-in grid {name!r} ({path})")
    return path


def load_grid(path: str | Path) -> Grid:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise GridError(f"cannot read grid {path}: {e.strerror or e}") from None
    return parse_grid(text, str(path))


def with_profile(grid: Grid, profile: str) -> Grid:
    """The grid on another simulator profile (`bench-matrix --profile NAME|FILE`), checked here."""
    try:
        resolve_profile(profile)
    except ValueError as e:
        raise GridError(f"--profile: {e}") from None
    return dataclasses.replace(grid, profile=profile)


def parse_grid(text: str, name: str = "<grid>") -> Grid:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise GridError(f"{name}: not valid TOML: {e}") from None
    return _Parser(name).grid(raw)


class _Parser:
    def __init__(self, name: str) -> None:
        self.name = name

    def fail(self, key: str, msg: str) -> GridError:
        return GridError(f"{self.name}: {key}: {msg}")

    def keys(self, obj: Mapping[str, Any], where: str, known: tuple[str, ...]) -> None:
        for k in obj:
            if k not in known:
                raise self.fail(f"{where}{k}", f"unknown key; known: {', '.join(known)}")

    def int_(self, v: Any, key: str, lo: int) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise self.fail(key, f"expected an integer >= {lo}, got {v!r}")
        return v

    def levels(self, raw: Mapping[str, Any], key: str) -> dict[str, float]:
        table = raw.get(key)
        if not isinstance(table, dict) or not table:
            raise self.fail(key, "missing: a table of level = positive number")
        out = {}
        for level, v in table.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v > 0 and math.isfinite(v)):
                raise self.fail(f"{key}.{level}", f"expected a positive number, got {v!r}")
            out[level] = float(v)
        return out

    def axis(self, block: Mapping[str, Any], where: str, axis: str) -> list[Any]:
        if axis not in block:
            raise self.fail(f"{where}{axis}", "missing")
        v = block[axis]
        vals = v if isinstance(v, list) else [v]
        if not vals:
            raise self.fail(f"{where}{axis}", "empty list")
        return vals

    def grid(self, raw: Mapping[str, Any]) -> Grid:
        self.keys(raw, "", _TOP)
        profile = raw.get("profile")
        if not isinstance(profile, str):
            raise self.fail("profile", f"expected a profile name or JSON file, got {profile!r}")
        try:
            resolve_profile(profile)
        except ValueError as e:
            raise self.fail("profile", str(e)) from None
        seed = self.int_(raw.get("seed", 0), "seed", 0)
        default_n = self.int_(raw.get("sessions"), "sessions", 1)
        families = family_names()
        by_family = raw.get("sessions_by_family", {})
        if not isinstance(by_family, dict):
            raise self.fail("sessions_by_family", "expected a table of family = sessions")
        for fam, n in by_family.items():
            if fam not in families:
                raise self.fail(f"sessions_by_family.{fam}", f"unknown family; known: {', '.join(families)}")
            self.int_(n, f"sessions_by_family.{fam}", 1)
        kv, load = self.levels(raw, "kv"), self.levels(raw, "load")
        blocks = raw.get("cells")
        if not isinstance(blocks, list) or not blocks:
            raise self.fail("cells", "missing: at least one [[cells]] block")
        cells: dict[str, Cell] = {}
        for i, block in enumerate(blocks):
            where = f"cells[{i}]."
            if not isinstance(block, dict):
                raise self.fail(f"cells[{i}]", "expected a table")
            self.keys(block, where, _AXES)
            fams = self.axis(block, where, "family")
            for f in fams:
                if f not in families:
                    raise self.fail(f"{where}family", f"unknown family {f!r}; known: {', '.join(families)}")
            workers = [self.int_(w, f"{where}tool_workers", 1) for w in self.axis(block, where, "tool_workers")]
            kvs = self.axis(block, where, "kv")
            loads = self.axis(block, where, "load")
            for axis, names, levels in (("kv", kvs, kv), ("load", loads, load)):
                for n in names:
                    if n not in levels:
                        raise self.fail(f"{where}{axis}", f"unknown level {n!r}; declared in [{axis}]: "
                                        f"{', '.join(levels)}")
            for f in fams:
                n = by_family.get(f, default_n)
                if f == "mix" and n < 5:
                    raise self.fail("sessions", f"family mix needs at least 5 sessions, got {n}")
                for w in workers:
                    for k in kvs:
                        for ld in loads:
                            c = Cell(f, w, k, kv[k], ld, load[ld], n, seed)
                            cells.setdefault(c.id, c)
        return Grid(self.name, profile, seed, tuple(cells.values()))
