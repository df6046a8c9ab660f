"""`mars-openhands record`: turn persisted OpenHands conversations into `mars-trace/1` sessions.

Reads what the SDK already persists for every conversation (`<dir>/base_state.json` with per-call
token usage, `<dir>/events/event-NNNNN-*.json` with timestamps), so any past run - CLI, launcher or
agent-server - becomes a replayable trace without re-running it. Plain JSON, no SDK import.

One LLM response = one trace turn: `input_tokens`/`output_tokens` from that response's token usage;
its tool calls become the turn's `tool` (several parallel calls: the first call's name, commands
joined with ` ; `, duration = first action to last observation, i.e. the batch's wall time). The
`finish` call ends the session (the final turn has `tool: null`). Not recoverable from the
persisted state and therefore left out: `shared_prefix_tokens` after a condensation and the
system prompt's token count.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from mars_openhands.openhands.instrument import describe_action
from mars_openhands.workload.trace import SessionTrace, ToolCall, Turn, write_trace

_FINAL_TOOLS = {"finish"}


class RecordError(ValueError):
    """A conversation directory that cannot be turned into a trace; names the file and field."""


@dataclass
class _Response:
    """One LLM response and the tool calls it made, in event order."""

    response_id: str
    actions: list[dict[str, Any]] = field(default_factory=list)
    t_first: float | None = None
    t_last_obs: float | None = None


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise RecordError(f"{path}: unreadable ({e})") from None


def _ts(ev: dict[str, Any], path: Path) -> float:
    try:
        return datetime.fromisoformat(ev["timestamp"]).timestamp()
    except (KeyError, TypeError, ValueError):
        raise RecordError(f"{path}: timestamp: missing or not ISO-8601") from None


def _usages(state: dict[str, Any], path: Path) -> dict[str, tuple[int, int]]:
    try:
        metrics = state["stats"]["usage_to_metrics"]
    except (KeyError, TypeError):
        raise RecordError(f"{path}: stats.usage_to_metrics: missing (no LLM usage recorded)") from None
    out = {}
    for usage in metrics.values():
        for u in usage.get("token_usages") or []:
            if u.get("response_id"):
                out[u["response_id"]] = (int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0))
    return out


def _responses(events_dir: Path) -> tuple[list[_Response], float]:
    files = sorted(events_dir.glob("event-*.json"))
    if not files:
        raise RecordError(f"{events_dir}: no event-*.json files")
    order: list[_Response] = []
    by_id: dict[str, _Response] = {}
    by_call: dict[str, _Response] = {}
    t_start = None
    for path in files:
        ev = _load(path)
        t = _ts(ev, path)
        t_start = t if t_start is None else min(t_start, t)
        rid = ev.get("llm_response_id")
        if rid and ev.get("source") == "agent":
            resp = by_id.get(rid)
            if resp is None:
                resp = by_id[rid] = _Response(rid, t_first=t)
                order.append(resp)
            if ev.get("kind") == "ActionEvent":
                resp.actions.append({"tool": ev.get("tool_name"), **(ev.get("action") or {})})
                by_call[ev.get("tool_call_id")] = resp
        elif ev.get("kind") in ("ObservationEvent", "AgentErrorEvent", "UserRejectObservation"):
            resp = by_call.get(ev.get("tool_call_id"))
            if resp is not None:
                resp.t_last_obs = t if resp.t_last_obs is None else max(resp.t_last_obs, t)
    return order, t_start or 0.0


def record_conversation(conv_dir: str | Path, *, arrival_s: float = 0.0) -> tuple[SessionTrace, float]:
    """One persisted conversation -> (its trace session, its wall-clock start time)."""
    d = Path(conv_dir)
    state_path = d / "base_state.json"
    if not state_path.is_file():
        raise RecordError(f"{d}: not a conversation directory (no base_state.json)")
    state = _load(state_path)
    usages = _usages(state, state_path)
    responses, t_start = _responses(d / "events")
    turns = []
    for resp in responses:
        if resp.response_id not in usages:
            raise RecordError(f"{state_path}: stats: no token usage for LLM response {resp.response_id!r}")
        prompt, completion = usages[resp.response_id]
        calls = [a for a in resp.actions if a["tool"] not in _FINAL_TOOLS]
        tool = None
        if calls:
            if resp.t_last_obs is None or resp.t_first is None:
                raise RecordError(f"{d}: tool call of response {resp.response_id!r} has no observation")
            cmds = [c for c in map(describe_action, calls) if c]
            tool = ToolCall(name=calls[0]["tool"], duration_s=max(0.0, resp.t_last_obs - resp.t_first),
                            command=" ; ".join(cmds) or None)
        turns.append(Turn(input_tokens=max(1, prompt), output_tokens=max(1, completion), tool=tool))
        if len(calls) < len(resp.actions):  # finish: the session ends here
            break
    if not turns:
        raise RecordError(f"{d}: no LLM responses in the events")
    if turns[-1].tool is not None:  # stopped mid-task (max iterations, error): end on this turn
        turns[-1] = Turn(turns[-1].input_tokens, turns[-1].output_tokens, None)
    session_id = str(state.get("id") or d.name)
    return SessionTrace(session_id=session_id, arrival_s=arrival_s, turns=tuple(turns),
                        source=f"openhands:{d}"), t_start


def find_conversations(paths: list[Path]) -> list[Path]:
    """Each path is a conversation dir, or a persistence dir holding several."""
    out = []
    for p in paths:
        if (p / "base_state.json").is_file():
            out.append(p)
        elif p.is_dir():
            out += sorted(c for c in p.iterdir() if (c / "base_state.json").is_file())
        else:
            raise RecordError(f"{p}: no such directory")
    if not out:
        raise RecordError(f"{', '.join(map(str, paths))}: no conversations found (no base_state.json)")
    return out


def record(paths: list[Path]) -> list[SessionTrace]:
    """All conversations under `paths`; arrival_s = start time relative to the earliest one."""
    recorded = [record_conversation(p) for p in find_conversations(paths)]
    t0 = min(t for _, t in recorded)
    sessions = [SessionTrace(s.session_id, round(t - t0, 6), s.turns, s.system_prompt_id,
                             s.system_prompt_tokens, s.source) for s, t in recorded]
    return sorted(sessions, key=lambda s: s.arrival_s)


def main(argv: list[str] | None = None) -> int:
    """Entry for `mars-openhands record CONV_DIR... -o trace.jsonl`."""
    p = argparse.ArgumentParser(prog="mars-openhands record",
                                description="Turn persisted OpenHands conversations into mars-trace/1 sessions.")
    p.add_argument("paths", nargs="+", type=Path,
                   help="conversation directories, or persistence directories holding them")
    p.add_argument("-o", "--output", type=Path, required=True, help="mars-trace/1 JSON Lines file to write")
    args = p.parse_args(argv)
    try:
        sessions = record(args.paths)
    except RecordError as e:
        print(f"mars-openhands record: error: {e}", file=sys.stderr)
        return 2
    write_trace(args.output, sessions)
    turns = sum(len(s.turns) for s in sessions)
    print(f"wrote {len(sessions)} sessions, {turns} turns to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
