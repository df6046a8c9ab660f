"""The one rule for every command that writes a run folder (docs/swebench.md#run-folders).

A run folder is one run's: its `run.json` names what the run is (its identity), which of those
fields are its inputs (RESUME may not change them), the names it writes at its top level and the
sub folders that are runs of its own (a demo's policies). A command takes its `--out` folder when
it is new or empty, or holds the same run (the command continues it); a folder holding another
run is refused unless `--resume` (continue it: refused, naming them, when its inputs differ) or
`--replace` (delete it first). `--replace` deletes only one run's folder: it refuses a folder
without `run.json`, one holding run folders of other runs, or anything the run did not write,
and names them. A folder holding files of no run is never taken.

A resumed run keeps an instance's result only where the hash of what it came from (`input_hash`:
the patch, the dataset record, the policy, the model) is the one recorded with it.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import re
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mars_openhands.hints import flag

RUN_FILE = "run.json"
FORMAT = "mars-run/1"
#: at most this many names in a refusal
SHOWN = 8


class RunFolderError(ValueError):
    """A folder the command may not take (or delete); the message names why and what to pass."""


@dataclass(frozen=True)
class RunSpec:
    """What a command records in its folder's run.json."""

    command: str                                     # e.g. "swebench-run", "bench-matrix"
    identity: Mapping[str, Any]                      # what the run is: the same identity continues it
    inputs: tuple[str, ...] = ()                     # identity fields RESUME may not change
    writes: tuple[str, ...] = ()                     # top-level names (glob patterns) the command writes
    parts: tuple[str, ...] = field(default=())       # sub folders that are runs of this run's own
    resumable: bool = True                           # False: the command has no --resume (it re-runs all)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "command": self.command, "run": dict(self.identity), "inputs": list(self.inputs),
                "writes": list(self.writes), "parts": list(self.parts)}


def args_identity(args: argparse.Namespace, skip: tuple[str, ...] = ("out", "resume", "replace")) -> dict[str, Any]:
    """A command's arguments as its run's identity (paths as text; the folder options left out)."""
    return {k: v for k, v in json.loads(json.dumps(vars(args), default=str)).items() if k not in skip}


def input_hash(**parts: Any) -> str:
    """A hash of what one instance's result came from (its patch, dataset record, policy, model...)."""
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def slug(text: str) -> str:
    """A dataset or model name as a folder name part (`/data/swe-bench-lite.jsonl` -> `swe-bench-lite`)."""
    name = Path(text).stem if Path(text).suffix else text
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "none"


def default_dir(root: Path, *parts: str, now: float | None = None) -> Path:
    """A new folder for one run under `root`: its parts and the UTC start time (`-2`, `-3`, ... when
    two runs start in one second)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    base = root / "-".join([*(slug(p) for p in parts), stamp])
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def read_spec(folder: Path) -> RunSpec | None:
    """The run recorded in `folder` (None: no readable run.json). A run.json of before this format
    (the identity itself) reads as a run without inputs, writes or parts."""
    path = folder / RUN_FILE
    try:
        data = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    if data.get("format") != FORMAT:
        return RunSpec("", data)
    return RunSpec(str(data.get("command", "")), dict(data.get("run") or {}), tuple(data.get("inputs") or ()),
                   tuple(data.get("writes") or ()), tuple(data.get("parts") or ()))


def _names(items: list[str]) -> str:
    more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more


def _value(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, list):
        return ",".join(map(str, v)) or "none"
    return str(v)


def _differences(old: Mapping[str, Any], new: Mapping[str, Any], keys: list[str]) -> str:
    return "; ".join(f"{k}: {_value(old.get(k))} there, {_value(new.get(k))} now" for k in keys)


def run_folders(folder: Path, depth: int = 2) -> list[Path]:
    """Run folders under `folder` (not itself), `depth` levels down at most."""
    found: list[Path] = []
    for level in range(1, depth + 1):
        found += [p.parent for p in folder.glob("/".join(["*"] * level) + "/" + RUN_FILE)]
    return sorted(found)


def check_replaceable(folder: Path, current: RunSpec) -> None:
    """RunFolderError unless `folder` is itself one run's folder holding only what that run wrote."""
    spec = read_spec(folder)
    runs = [p for p in run_folders(folder)]
    if spec is None:
        held = (f"; it holds run folders: {_names([str(p) for p in runs])} (pass one of them as "
                f"{flag('--out', 'DIR')})") if runs else ""
        raise RunFolderError(f"{flag('--replace')}: {folder} is not a run's folder (no {RUN_FILE}){held}; "
                             "nothing is deleted")
    # what the folder's run recorded it writes; for the same command, also what it writes now (a
    # folder of an older version that wrote a name it did not yet record is still its own)
    if spec.command == current.command:
        writes, parts = (*spec.writes, *current.writes), (*spec.parts, *current.parts)
    elif spec.writes:
        writes, parts = spec.writes, spec.parts
    else:
        writes, parts = current.writes, current.parts
    foreign: list[str] = []
    for entry in sorted(folder.iterdir()):
        name = entry.name
        if name == RUN_FILE:
            continue
        part = any(fnmatch.fnmatchcase(name, p) for p in parts)
        if not part and not any(fnmatch.fnmatchcase(name, p) for p in writes):
            foreign.append(f"{name}/" if entry.is_dir() else name)
    # a part is named by its path below the folder: `mars`, or `round-*/mars` for a demo's rounds
    others = [str(p) for p in runs if not any(fnmatch.fnmatchcase(p.relative_to(folder).as_posix(), q) for q in parts)]
    problems = []
    if others:
        problems.append(f"it holds run folders of other runs: {_names(others)}")
    if foreign:
        problems.append(f"it holds what no {spec.command or 'such'} run writes: {_names(foreign)}")
    if problems:
        raise RunFolderError(f"{flag('--replace')}: {folder} is not one run's folder: " + "; ".join(problems)
                             + "; nothing is deleted")


def claim(folder: Path, spec: RunSpec, *, resume: bool = False, replace: bool = False) -> bool:
    """Take `folder` for the run `spec`; True when it continues results already there.

    Raises RunFolderError when the folder holds another run and neither `resume` nor `replace` is
    given, when `resume` would change the run's inputs, when `replace` would delete more than one
    run's folder, or when it holds files of no run.
    """
    if resume and replace:
        raise RunFolderError(f"{flag('--resume')} and {flag('--replace')}: pass one of them")
    if folder.exists() and not folder.is_dir():
        raise RunFolderError(f"{flag('--out', folder)}: not a folder")
    held = folder.is_dir() and any(folder.iterdir())
    if held and replace:
        check_replaceable(folder, spec)
        shutil.rmtree(folder)
        held = False
    if held:
        old = read_spec(folder)
        if old is None:
            entries = sorted(e.name for e in folder.iterdir())
            raise RunFolderError(f"{flag('--out', folder)} holds files of no run ({_names(entries)}); pass another "
                                 f"{flag('--out', 'DIR')} (a new or empty folder)")
        keys = list(dict.fromkeys([*old.identity, *spec.identity]))
        differ = [k for k in keys if old.identity.get(k) != spec.identity.get(k)]
        if differ and not resume:
            what = f"{flag('--resume')} to continue it, " if spec.resumable else ""
            raise RunFolderError(
                f"{flag('--out', folder)} holds another run ({_differences(old.identity, spec.identity, differ)}); "
                f"pass {what}{flag('--replace')} to delete it and start again, or another {flag('--out', 'DIR')}")
        fixed = [k for k in differ if k in spec.inputs]
        if fixed:
            raise RunFolderError(
                f"{flag('--resume')}: {folder} holds a run of other inputs "
                f"({_differences(old.identity, spec.identity, fixed)}); its results are not theirs: pass "
                f"{flag('--replace')} to delete it and start again, or another {flag('--out', 'DIR')}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RUN_FILE).write_text(json.dumps(spec.to_json(), indent=2) + "\n")
    return held
