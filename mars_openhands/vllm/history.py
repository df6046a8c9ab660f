"""The engine's per-session history: what the scheduler saw and did at each agent boundary.

Each session's boundary happenings (turns, tool calls, pins taken and released, with engine
timestamps) are kept in a bounded `SessionHistory`, so `/mars/v1/stats?session=<id>` can show
what the scheduler did for one agent run, in order.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any

from mars_openhands.events import (
    Event,
    SessionEnded,
    ToolCancelled,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    TurnSubmitted,
)

#: Happenings kept per session (oldest dropped first) and sessions kept (least recently active
#: dropped first) by `SessionHistory`: enough for a long agent run, a few MB at most.
HISTORY_PER_SESSION = 256
HISTORY_SESSIONS = 1024

#: The fields of each kind of history entry, in the order `SessionHistory.add` receives them.
HISTORY_FIELDS: dict[str, tuple[str, ...]] = {
    TurnSubmitted.TYPE: ("request_id", "turn_index", "prompt_tokens"),
    TurnFinished.TYPE: ("request_id", "turn_index", "output_tokens", "status"),
    ToolStarted.TYPE: ("tool_name", "command", "call_id", "event_t"),
    ToolFinished.TYPE: ("tool_name", "duration_s", "exit_status", "call_id", "event_t"),
    ToolCancelled.TYPE: ("tool_name", "call_id", "event_t"),
    SessionEnded.TYPE: ("reason", "event_t"),
    "pin_taken": ("blocks", "ttl_s"),
    "pin_released": ("reason", "blocks", "held_s"),
}


class SessionHistory:
    """Bounded, ordered record of each session's boundary happenings, for inspection.

    Appending is one tuple into a `deque(maxlen)` (the engine thread pays almost nothing); the
    dictionaries callers see are built only when asked for.
    """

    def __init__(self, per_session: int = HISTORY_PER_SESSION,
                 max_sessions: int = HISTORY_SESSIONS) -> None:
        if per_session < 1 or max_sessions < 1:
            raise ValueError(f"SessionHistory bounds must be >= 1 (got per_session={per_session}, "
                             f"max_sessions={max_sessions})")
        self.per_session, self.max_sessions = per_session, max_sessions
        self._logs: OrderedDict[str, list] = OrderedDict()   # session id -> [entries, total added]

    def __len__(self) -> int:
        return len(self._logs)

    def add(self, session_id: str, t: float, kind: str, *detail: Any) -> None:
        log = self._logs.get(session_id)
        if log is None:
            log = self._logs[session_id] = [deque(maxlen=self.per_session), 0]
            if len(self._logs) > self.max_sessions:
                self._logs.popitem(last=False)
        else:
            self._logs.move_to_end(session_id)
        log[0].append((t, kind, detail))
        log[1] += 1

    def add_event(self, ev: Event, now: float) -> None:
        """Entry of a session's boundary event (`event_t`: the sender's own timestamp)."""
        if isinstance(ev, ToolStarted):
            self.add(ev.session_id, now, ev.TYPE, ev.tool_name, ev.command, ev.call_id, ev.t)
        elif isinstance(ev, ToolFinished):
            self.add(ev.session_id, now, ev.TYPE, ev.tool_name, ev.duration_s, ev.exit_status,
                     ev.call_id, ev.t)
        elif isinstance(ev, ToolCancelled):
            self.add(ev.session_id, now, ev.TYPE, ev.tool_name, ev.call_id, ev.t)
        elif isinstance(ev, SessionEnded):
            self.add(ev.session_id, now, ev.TYPE, ev.reason, ev.t)

    def get(self, session_id: str) -> dict | None:
        """The session's kept entries, oldest first, as dictionaries; None if none are kept."""
        log = self._logs.get(session_id)
        if log is None:
            return None
        entries, total = log
        return {"session_id": session_id, "dropped_entries": total - len(entries),
                "history": [{"t": t, "event": kind, **dict(zip(HISTORY_FIELDS[kind], detail))}
                            for t, kind, detail in entries]}
