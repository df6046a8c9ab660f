"""SemiAnalysis/Weka Claude Code traces (the kv-cache-tester layout) -> `mars-trace/1` sessions.

A record is one session: `id`, `block_size`, `tool_tokens`, `system_tokens` and `requests`, an
ordered list of API calls (`t` seconds from the session's start, `in`, `out`, `hash_ids`: one id
per `block_size`-token block of the prompt, equal ids for equal content, `stop`, `api_time`) and
inline sub-agent groups (`type: "subagent"`, `agent_id`, their own `requests`). How a record
becomes sessions:

- one call = one turn (`in` / `out`, at least 1 each);
- the shared prefix is the longest common run of `hash_ids` with the previous call, in blocks: when
  it covers every whole block of the previous prompt the context only grew (the default, which also
  counts the previous reply), else `shared_prefix_tokens` = blocks x `block_size`;
- the time between calls, `t[k+1] - (t[k] + api_time[k])` (at least 0), becomes the tool call after
  turn k: `tool` (the format has no tool names), `subagent` when a sub-agent group ran in between,
  and after `stop: end_turn` a `human` wait or a cut (`--human split`);
- a sub-agent group becomes a session `<id>/<agent_id>` arriving when its first call was sent (its
  times are the session's; times before the group's own `t` are read as relative to it), or is
  dropped; the parent's wait for it stays either way;
- `hash_ids` are scoped per session (`hash_id_scope: "local"`), so they cannot show what sessions
  share; the tool schemas, sent first, can: sessions declaring the same `tool_tokens` get the
  system prompt id `weka:tools:<tool_tokens>` over that many tokens;
- arrivals: the format has none; sessions arrive in file order, Poisson at the chosen rate;
- `numbers` (`--numbers even|odd`) reads only the files whose number (the last digits of the
  name, `trace_0042.json`: 42) is even or odd: the odd ones are never opened; `max_gap_s` caps
  each wait between calls (as kv-cache-tester's replayer caps delays, `--max-delay`, 600 s).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mars_openhands.workload.importers.arrivals import poisson_arrivals
from mars_openhands.workload.importers.errors import Problems, Where
from mars_openhands.workload.importers.options import ImportOptions, part_id, wait_call
from mars_openhands.workload.importers.source import records
from mars_openhands.workload.trace import SessionTrace, ToolCall, Turn

DEFAULT_BLOCK_SIZE = 64
_EPS = 1e-6


@dataclass(frozen=True, slots=True)
class _Request:
    t: float
    tokens_in: int
    tokens_out: int
    hash_ids: tuple[int, ...]
    stop: str
    api_time: float


@dataclass(frozen=True, slots=True)
class _Group:
    agent_id: str
    t: float | None
    tool_tokens: int
    items: tuple[_Request | _Group, ...]


@dataclass(frozen=True, slots=True)
class _Session:
    session_id: str
    block_size: int
    tool_tokens: int
    items: tuple[_Request | _Group, ...]
    where: Where


# ---- reading ------------------------------------------------------------------------------------

def _hash_ids(where: Where, r: Mapping[str, Any], name: str) -> tuple[int, ...] | None:
    v = r.get("hash_ids")
    if v is None:
        return ()
    if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in v):
        where.problem(name, "expected a list of integers")
        return None
    return tuple(v)


def _request(where: Where, r: Mapping[str, Any], p: str) -> _Request | None:
    mark = where.mark()
    kind = r.get("type")
    if kind is not None and kind not in ("n", "s"):
        where.problem(f"{p}type", f"expected 'n', 's' or 'subagent', got {kind!r}")
    t = where.number(r, "t", p)
    tokens_in = where.number(r, "in", p, integer=True)
    tokens_out = where.number(r, "out", p, integer=True)
    hashes = _hash_ids(where, r, f"{p}hash_ids")
    stop = r.get("stop") or ""
    if not isinstance(stop, str):
        where.problem(f"{p}stop", f"expected a string, got {stop!r}")
    api_time = where.number(r, "api_time", p, required=False, default=0.0)
    if not where.ok_since(mark):
        return None
    return _Request(float(t), tokens_in, tokens_out, hashes or (), stop, float(api_time))


def _group(where: Where, r: Mapping[str, Any], p: str) -> _Group | None:
    mark = where.mark()
    agent_id = where.string(r, "agent_id", p)
    t = where.number(r, "t", p, required=False)
    tool_tokens = where.number(r, "tool_tokens", p, integer=True, required=False, default=0)
    inner = where.objects(r, "requests", p)
    items = _items(where, inner, f"{p}requests") if inner is not None else None
    if not where.ok_since(mark) or agent_id is None or items is None:
        return None
    return _Group(agent_id, None if t is None else float(t), tool_tokens, items)


def _items(where: Where, raw: Sequence[Mapping[str, Any]], name: str) -> tuple[_Request | _Group, ...] | None:
    out: list[_Request | _Group | None] = []
    for i, r in enumerate(raw):
        p = f"{name}[{i}]."
        out.append(_group(where, r, p) if r.get("type") == "subagent" else _request(where, r, p))
    return None if None in out else tuple(x for x in out if x is not None)


def _session(where: Where, obj: Mapping[str, Any]) -> _Session | None:
    mark = where.mark()
    sid = where.string(obj, "id")
    block_size = where.number(obj, "block_size", integer=True, required=False, minimum=1,
                              default=DEFAULT_BLOCK_SIZE)
    tool_tokens = where.number(obj, "tool_tokens", integer=True, required=False, default=0)
    where.number(obj, "system_tokens", integer=True, required=False, default=0)
    raw = where.objects(obj, "requests")
    if raw is not None and not raw:
        where.problem("requests", "expected a non-empty list")
    items = _items(where, raw, "requests") if raw else None
    if not where.ok_since(mark) or sid is None or items is None:
        return None
    return _Session(sid, block_size, tool_tokens, items, where)


# ---- converting ---------------------------------------------------------------------------------

def _shared_prefix(prev: _Request, cur: _Request, block_size: int) -> int | None:
    """`shared_prefix_tokens` of `cur` after `prev` from their block hashes (None: the context grew)."""
    if not prev.hash_ids or not cur.hash_ids:
        return None
    lcp = 0
    for a, b in zip(prev.hash_ids, cur.hash_ids):
        if a != b:
            break
        lcp += 1
    if lcp >= prev.tokens_in // block_size:
        return None
    return min(lcp * block_size, cur.tokens_in)


@dataclass(frozen=True, slots=True)
class _Chain:
    """One agent's calls (a session or a sub-agent group), with what its sessions inherit."""

    session_id: str
    items: tuple[_Request | _Group, ...]
    offset_s: float       # add to the calls' `t` for the session's time
    tool_tokens: int


def _sessions_of(chain: _Chain, start_s: float, block_size: int, source: str,
                 opts: ImportOptions) -> list[SessionTrace]:
    """The sessions of one chain (its parts and, recursively, its sub-agents); the chain's time 0
    is at `start_s`."""
    reqs: list[tuple[_Request, bool]] = []       # (call, a sub-agent group ran just before it)
    groups: list[_Group] = []
    for i, it in enumerate(chain.items):
        if isinstance(it, _Group):
            groups.append(it)
        else:
            reqs.append((it, i > 0 and isinstance(chain.items[i - 1], _Group)))
    head_id = f"weka:tools:{chain.tool_tokens}" if chain.tool_tokens else None

    def at(r: _Request) -> float:
        return start_s + chain.offset_s + r.t

    out: list[SessionTrace] = []
    turns: list[Turn] = []
    part_start = at(reqs[0][0]) if reqs else 0.0
    for k, (r, _) in enumerate(reqs):
        shared = _shared_prefix(reqs[k - 1][0], r, block_size) if turns else None
        tool: ToolCall | None = None
        cut = False
        if k + 1 < len(reqs):
            nxt, group_between = reqs[k + 1]
            gap = opts.gap(at(nxt) - (at(r) + r.api_time))
            if r.stop == "end_turn":
                cut = opts.human == "split"
                tool = None if cut else wait_call("human", gap)
            elif group_between:
                tool = wait_call("subagent", gap)
            else:
                tool = ToolCall("tool", round(max(0.0, gap), 3))
        turns.append(Turn(max(1, r.tokens_in), max(1, r.tokens_out), tool, shared))
        if cut or k + 1 == len(reqs):
            out.append(SessionTrace(part_id(chain.session_id, len(out) + 1), round(part_start, 3), tuple(turns),
                                    head_id, chain.tool_tokens if head_id else 0, source))
            turns = []
            if cut:
                part_start = at(reqs[k + 1][0])
    if opts.subagents == "session":
        for g in groups:
            out += _sessions_of(_sub_chain(chain, g), start_s, block_size, source, opts)
    return out


def _sub_chain(parent: _Chain, g: _Group) -> _Chain:
    first = next((it for it in g.items if isinstance(it, _Request)), None)
    relative = g.t is not None and first is not None and first.t + _EPS < g.t
    offset = parent.offset_s + (g.t if relative and g.t is not None else 0.0)
    return _Chain(f"{parent.session_id}/{g.agent_id}", g.items, offset, g.tool_tokens)


def file_number(path: Path) -> int | None:
    """The number a session file's name ends with (`trace_0042.json`: 42), or None."""
    digits = re.search(r"(\d+)\D*$", path.name.split(".")[0])
    return None if digits is None else int(digits.group(1))


def _selector(opts: ImportOptions, problems: Problems) -> Callable[[Path], bool] | None:
    if opts.numbers == "all":
        return None
    want = 0 if opts.numbers == "even" else 1

    def keep(f: Path) -> bool:
        n = file_number(f)
        if n is None:
            problems.add(f"{f}: --numbers {opts.numbers}: the file name holds no number")
            return False
        return n % 2 == want
    return keep


def read_weka(path: Path, opts: ImportOptions, problems: Problems) -> list[SessionTrace]:
    """The sessions of a Weka trace (file or directory); problems are recorded, not raised."""
    parsed: list[_Session] = []
    seen: dict[str, Where] = {}
    for where, obj in records(path, problems, _selector(opts, problems)):
        s = _session(where, obj)
        if s is None:
            continue
        if s.session_id in seen:
            first = seen[s.session_id]
            where.problem("id", f"duplicate {s.session_id!r} (first at {first.file}:{first.line})")
            continue
        seen[s.session_id] = where
        parsed.append(s)
    if problems.count:
        return []
    starts = poisson_arrivals(len(parsed), opts.rate, opts.seed)
    out: list[SessionTrace] = []
    for s, start in zip(parsed, starts):
        chain = _Chain(s.session_id, s.items, 0.0, s.tool_tokens)
        out += _sessions_of(chain, start, s.block_size, f"weka:{s.where.file}:{s.where.line}", opts)
    return out
