"""TraceLab round traces (uw-syfi/TraceLab: Claude Code and Codex sessions) -> `mars-trace/1` sessions.

A record is one LLM call ("round"): `session_id`, `round_index`, `input_tokens_total` (the whole
prompt), `prefix_tokens` (the part the provider served from its prompt cache), `output_tokens`
(reasoning included), `first_input_event_type` (`user_message` or `tool_result`: what the call
answers), `timing_events[]` (ISO timestamps) and `tools[]` (`tool_name`, `emitted_at`,
`result_at`, `tool_wall_latency_ms`). Rows of one session may lie anywhere in the file. How they
become sessions:

- one round = one turn, in `round_index` order (`input_tokens_total` / `output_tokens`, at least 1);
- `shared_prefix_tokens` = `prefix_tokens` (at most the previous prompt + reply): the provider's
  cache hit, a lower bound on the shared context (a provider-side cache miss reads as a rewrite);
  round 0's hit is what the session shares with earlier ones, its system prompt: id
  `tracelab:<provider>/<project>/<model>` (those present), over that many tokens;
- the round's tools become its tool call: the first tool's name; `duration_s` from the first
  call's `emitted_at` to the last `result_at` (or `emitted_at` + `tool_wall_latency_ms`);
- a round answering a `user_message` follows a human's turn: the previous round gets a `human` wait
  from its last event to this round's first, or the session is cut there (`--human split`);
- arrivals are real: each session's (or part's) first event, relative to the earliest in the file.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mars_openhands.workload.importers.arrivals import iso_seconds
from mars_openhands.workload.importers.errors import Problems, Where
from mars_openhands.workload.importers.options import ImportOptions, part_id, wait_call
from mars_openhands.workload.importers.source import records
from mars_openhands.workload.trace import SessionTrace, ToolCall, Turn

USER_MESSAGE = "user_message"


@dataclass(frozen=True, slots=True)
class _Tool:
    name: str
    start_s: float
    end_s: float


@dataclass(frozen=True, slots=True)
class _Round:
    session_id: str
    index: int
    tokens_in: int
    prefix: int
    tokens_out: int
    after_user: bool
    first_s: float       # the round's first event: the input it answers
    last_s: float        # the round's last event
    tools: tuple[_Tool, ...]
    group: str           # provider, project and model: what the system-prompt id names
    where: Where


def _time(where: Where, obj: Mapping[str, Any], key: str, p: str, *, required: bool = True) -> float | None:
    text = where.string(obj, key, p, required=required)
    if text is None:
        return None
    t = iso_seconds(text)
    if t is None:
        where.problem(f"{p}{key}", f"expected an ISO 8601 timestamp, got {text!r}")
    return t


def _tool(where: Where, raw: Mapping[str, Any], p: str) -> _Tool | None:
    mark = where.mark()
    name = where.string(raw, "tool_name", p)
    start = _time(where, raw, "emitted_at", p)
    end = _time(where, raw, "result_at", p, required=False)
    wall_ms = where.number(raw, "tool_wall_latency_ms", p, required=False)
    if end is None and raw.get("result_at") is None and wall_ms is None:
        where.problem(f"{p}result_at", "missing, and so is tool_wall_latency_ms")
    if not where.ok_since(mark) or name is None or start is None:
        return None
    return _Tool(name, start, end if end is not None else start + wall_ms / 1000.0)


def _round(where: Where, obj: Mapping[str, Any]) -> _Round | None:
    mark = where.mark()
    sid = where.string(obj, "session_id")
    index = where.number(obj, "round_index", integer=True)
    tokens_in = where.number(obj, "input_tokens_total", integer=True)
    prefix = where.number(obj, "prefix_tokens", integer=True, required=False, default=0)
    tokens_out = where.number(obj, "output_tokens", integer=True)
    first_input = obj.get("first_input_event_type")
    if first_input is not None and not isinstance(first_input, str):
        where.problem("first_input_event_type", f"expected a string, got {first_input!r}")
    events = where.objects(obj, "timing_events")
    if events is not None and not events:
        where.problem("timing_events", "expected a non-empty list")
    times = [_time(where, e, "timestamp", f"timing_events[{i}].") for i, e in enumerate(events or ())]
    raw_tools = where.objects(obj, "tools", required=False)
    tools = [_tool(where, t, f"tools[{i}].") for i, t in enumerate(raw_tools or ())]
    group = "/".join(str(obj[k]) for k in ("provider", "project", "model") if obj.get(k))
    if not where.ok_since(mark) or sid is None:
        return None
    stamps = [t for t in times if t is not None]
    return _Round(sid, index, tokens_in, prefix, tokens_out, first_input == USER_MESSAGE, min(stamps),
                  max(stamps), tuple(t for t in tools if t is not None), group, where)


def _tool_call(r: _Round, nxt: _Round, opts: ImportOptions) -> tuple[ToolCall | None, bool]:
    """(the tool call after round `r`, whether the session is cut there)."""
    if nxt.after_user:
        if opts.human == "split":
            return None, True
        return wait_call("human", nxt.first_s - max([r.last_s, *(t.end_s for t in r.tools)])), False
    if not r.tools:
        return ToolCall("tool", round(max(0.0, nxt.first_s - r.last_s), 3)), False
    start = min(t.start_s for t in r.tools)
    end = max(t.end_s for t in r.tools)
    return ToolCall(r.tools[0].name, round(max(0.0, end - start), 3)), False


def _sessions(rounds: list[_Round], t0: float, opts: ImportOptions) -> list[SessionTrace]:
    first = rounds[0]
    head_id = f"tracelab:{first.group}" if first.prefix else None
    source = f"tracelab:{first.where.file}:{first.where.line}"
    out: list[SessionTrace] = []
    turns: list[Turn] = []
    part_start = first.first_s
    for k, r in enumerate(rounds):
        shared = None
        if turns:
            prev = rounds[k - 1]
            whole = prev.tokens_in + prev.tokens_out
            shared = min(r.prefix, r.tokens_in) if r.prefix < whole else None
        tool, cut = _tool_call(r, rounds[k + 1], opts) if k + 1 < len(rounds) else (None, False)
        turns.append(Turn(max(1, r.tokens_in), max(1, r.tokens_out), tool, shared))
        if cut or k + 1 == len(rounds):
            out.append(SessionTrace(part_id(first.session_id, len(out) + 1), round(part_start - t0, 3),
                                    tuple(turns), head_id, first.prefix if head_id else 0, source))
            turns = []
            if cut:
                part_start = rounds[k + 1].first_s
    return out


def read_tracelab(path: Path, opts: ImportOptions, problems: Problems) -> list[SessionTrace]:
    """The sessions of a TraceLab round trace (file or directory); problems are recorded, not raised."""
    by_session: dict[str, dict[int, _Round]] = {}
    for where, obj in records(path, problems):
        r = _round(where, obj)
        if r is None:
            continue
        rounds = by_session.setdefault(r.session_id, {})
        if r.index in rounds:
            first = rounds[r.index].where
            where.problem("round_index", f"duplicate round {r.index} of session {r.session_id!r} "
                                         f"(first at {first.file}:{first.line})")
            continue
        rounds[r.index] = r
    if problems.count or not by_session:
        return []
    t0 = min(r.first_s for rounds in by_session.values() for r in rounds.values())
    out: list[SessionTrace] = []
    for rounds in by_session.values():
        out += _sessions([rounds[i] for i in sorted(rounds)], t0, opts)
    return out
