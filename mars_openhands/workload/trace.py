"""The `mars-trace/1` format: JSON Lines, one agent session per line.

Read by the simulator, the engine replay benchmark and the recorders; see docs/workload.md
"Trace format". Unknown fields are ignored; a malformed line raises `TraceError`
naming its line number and the field.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, overload

SCHEMA = "mars-trace/1"


class TraceError(ValueError):
    """A trace that does not follow `mars-trace/1`."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    duration_s: float
    cpu_cores: float = 1.0
    command: str | None = None


def worker_share(cpu_cores: float) -> float:
    """The part of one tool worker a call holds while it runs: its cores, at most one (cores
    beyond one load the host's CPUs but hold no more workers; see docs/workload.md). 0 cores is
    read as 1.0, as the trace format reads it."""
    return cpu_cores if 0.0 < cpu_cores < 1.0 else 1.0


@dataclass(frozen=True, slots=True)
class Turn:
    input_tokens: int
    output_tokens: int
    tool: ToolCall | None = None
    #: Tokens at the start of this prompt equal to the previous prompt + output; None = all of them.
    shared_prefix_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class SessionTrace:
    session_id: str
    arrival_s: float
    turns: tuple[Turn, ...]
    system_prompt_id: str | None = None
    system_prompt_tokens: int = 0
    source: str = ""

    def shared_prefix(self, k: int) -> int:
        """Tokens of turn k's prompt reused from turn k-1's prompt + output (0 for the first turn)."""
        if k == 0:
            return 0
        prev = self.turns[k - 1]
        default = prev.input_tokens + prev.output_tokens
        t = self.turns[k]
        return min(default if t.shared_prefix_tokens is None else t.shared_prefix_tokens, t.input_tokens)


def _num(obj: Mapping[str, Any], key: str, where: str, *, integer: bool, required: bool = True,
         minimum: float = 0.0) -> Any:
    if key not in obj or obj[key] is None:
        if required:
            raise TraceError(f"{where}.{key}: missing")
        return None
    v = obj[key]
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok or not math.isfinite(v):
        raise TraceError(f"{where}.{key}: expected {'an integer' if integer else 'a number'}, got {v!r}")
    if v < minimum:
        raise TraceError(f"{where}.{key}: must be >= {minimum:g}, got {v!r}")
    return v


@overload
def _str(obj: Mapping[str, Any], key: str, where: str, *, required: Literal[True]) -> str: ...
@overload
def _str(obj: Mapping[str, Any], key: str, where: str, *, required: Literal[False]) -> str | None: ...
def _str(obj: Mapping[str, Any], key: str, where: str, *, required: bool) -> str | None:
    v = obj.get(key)
    if v is None:
        if required:
            raise TraceError(f"{where}.{key}: missing")
        return None
    if not isinstance(v, str) or (required and not v):
        raise TraceError(f"{where}.{key}: expected a non-empty string, got {v!r}")
    return v


def _tool(obj: Any, where: str) -> ToolCall | None:
    if obj is None:
        return None
    if not isinstance(obj, Mapping):
        raise TraceError(f"{where}: expected an object or null")
    return ToolCall(name=_str(obj, "name", where, required=True),
                    duration_s=float(_num(obj, "duration_s", where, integer=False)),
                    cpu_cores=float(_num(obj, "cpu_cores", where, integer=False, required=False) or 1.0),
                    command=_str(obj, "command", where, required=False))


def session_from_dict(obj: Any) -> SessionTrace:
    if not isinstance(obj, Mapping):
        raise TraceError("session: expected a JSON object")
    if obj.get("schema") != SCHEMA:
        raise TraceError(f"schema: expected {SCHEMA!r}, got {obj.get('schema')!r}")
    turns_raw = obj.get("turns")
    if not isinstance(turns_raw, list) or not turns_raw:
        raise TraceError("turns: expected a non-empty list")
    turns = []
    for k, t in enumerate(turns_raw):
        where = f"turns[{k}]"
        if not isinstance(t, Mapping):
            raise TraceError(f"{where}: expected an object")
        turns.append(Turn(input_tokens=_num(t, "input_tokens", where, integer=True, minimum=1),
                          output_tokens=_num(t, "output_tokens", where, integer=True, minimum=1),
                          tool=_tool(t.get("tool"), f"{where}.tool"),
                          shared_prefix_tokens=_num(t, "shared_prefix_tokens", where, integer=True,
                                                    required=False)))
    return SessionTrace(session_id=_str(obj, "session_id", "session", required=True),
                        arrival_s=float(_num(obj, "arrival_s", "session", integer=False)),
                        turns=tuple(turns),
                        system_prompt_id=_str(obj, "system_prompt_id", "session", required=False),
                        system_prompt_tokens=_num(obj, "system_prompt_tokens", "session",
                                                  integer=True, required=False) or 0,
                        source=_str(obj, "source", "session", required=False) or "")


def session_to_dict(s: SessionTrace) -> dict[str, Any]:
    turns = []
    for t in s.turns:
        d: dict[str, Any] = {"input_tokens": t.input_tokens, "output_tokens": t.output_tokens}
        if t.shared_prefix_tokens is not None:
            d["shared_prefix_tokens"] = t.shared_prefix_tokens
        d["tool"] = None if t.tool is None else {
            k: v for k, v in (("name", t.tool.name), ("command", t.tool.command),
                              ("duration_s", t.tool.duration_s), ("cpu_cores", t.tool.cpu_cores))
            if v is not None}
        turns.append(d)
    out: dict[str, Any] = {"schema": SCHEMA, "session_id": s.session_id, "arrival_s": s.arrival_s}
    if s.source:
        out["source"] = s.source
    if s.system_prompt_id is not None:
        out["system_prompt_id"] = s.system_prompt_id
        out["system_prompt_tokens"] = s.system_prompt_tokens
    out["turns"] = turns
    return out


def parse_trace(lines: Iterable[str], name: str = "<trace>") -> list[SessionTrace]:
    sessions, seen = [], set()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            s = session_from_dict(json.loads(line))
        except json.JSONDecodeError as e:
            raise TraceError(f"{name}:{lineno}: not JSON ({e.msg})") from None
        except TraceError as e:
            raise TraceError(f"{name}:{lineno}: {e}") from None
        if s.session_id in seen:
            raise TraceError(f"{name}:{lineno}: session_id: duplicate {s.session_id!r}")
        seen.add(s.session_id)
        sessions.append(s)
    if not sessions:
        raise TraceError(f"{name}: no sessions")
    return sessions


def read_trace(path: str | Path) -> list[SessionTrace]:
    path = Path(path)
    with path.open() as f:
        return parse_trace(f, str(path))


def write_trace(path: str | Path, sessions: Iterable[SessionTrace]) -> None:
    with Path(path).open("w") as f:
        for s in sessions:
            f.write(json.dumps(session_to_dict(s)) + "\n")
