"""Tool boundaries an engine infers or holds back, so MARS works behind a router and without events.

- **Inferred tools.** An agent that sends no events still ends a call with tool calls (an
  OpenAI-compatible server answers `finish_reason == "tool_calls"`). The serving layer reports that
  as a `ToolStarted` named `INFERRED_TOOL`; the session's next call ends it. The policy prices pins
  and learns tool times from inferred tools as from real ones, but never counts them on the tool
  plane: an engine cannot tell a queued tool from a running one, nor which host runs it. Real
  events take precedence: a session that sent one tool or session event is never inferred again,
  and a real `tool_started` replaces an inferred one still open.
- **Held events.** Tool events for a session this engine has not seen (it moved here after a
  failover, or its events outran its calls) wait up to `hold_s` and are applied when the session's
  next call arrives; a `session_ended` for an unknown session is not held (there is nothing to end).
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TypeGuard

from mars_openhands.events import Event, SessionEnded, ToolCancelled, ToolFinished, ToolStarted

#: `ToolStarted.tool_name` of an inferred tool call (no agent names a tool like this).
INFERRED_TOOL = "mars:inferred"

#: Events an agent sends (as opposed to the engine's own turn events): they mark a session evented.
AgentEvent = ToolStarted | ToolFinished | ToolCancelled | SessionEnded
HeldEvent = ToolStarted | ToolFinished | ToolCancelled


def is_inferred(ev: Event) -> TypeGuard[ToolStarted]:
    return isinstance(ev, ToolStarted) and ev.tool_name == INFERRED_TOOL


@dataclass
class BoundaryInference:
    """Which sessions send their own tool events, and the inferred tool each other session has open.

    Both tables are bounded (least recently touched dropped first): a forgotten evented session
    would at worst be inferred again, a forgotten open tool is simply not measured.
    """

    max_sessions: int = 65536
    inferred: int = 0                  # inferred tools started
    measured: int = 0                  # inferred tools ended by the session's next call
    _evented: OrderedDict[str, None] = field(default_factory=OrderedDict, repr=False)
    _open: OrderedDict[str, ToolStarted] = field(default_factory=OrderedDict, repr=False)

    def evented(self, session_id: str) -> bool:
        return session_id in self._evented

    def real_event(self, ev: AgentEvent) -> None:
        """An agent event arrived: the session reports its own boundaries from now on."""
        sid = ev.session_id
        self._open.pop(sid, None)
        self._evented[sid] = None
        self._evented.move_to_end(sid)
        if len(self._evented) > self.max_sessions:
            self._evented.popitem(last=False)

    def start(self, ev: ToolStarted) -> bool:
        """Open an inferred tool; False (ignored) for a session that sends its own events."""
        if ev.session_id in self._evented:
            return False
        self._open[ev.session_id] = ev
        self._open.move_to_end(ev.session_id)
        if len(self._open) > self.max_sessions:
            self._open.popitem(last=False)
        self.inferred += 1
        return True

    def end(self, session_id: str, now: float) -> ToolFinished | None:
        """The session's next call arrived: its inferred tool, if one is open, ends now."""
        started = self._open.pop(session_id, None)
        if started is None:
            return None
        self.measured += 1
        return ToolFinished(session_id, now, INFERRED_TOOL, duration_s=max(0.0, now - started.t))

    def forget(self, session_id: str) -> None:
        self._open.pop(session_id, None)

    def stats(self) -> dict[str, int]:
        return {"inferred_tools": self.inferred, "inferred_tools_measured": self.measured,
                "inferred_tools_open": len(self._open), "evented_sessions": len(self._evented)}


@dataclass
class HeldEvents:
    """Tool events of sessions not seen yet, kept `hold_s` seconds (engine clock) in arrival order."""

    hold_s: float = 30.0
    max_events: int = 4096
    dropped: int = 0                   # expired, or refused because the table was full
    applied: int = 0
    _held: OrderedDict[str, tuple[float, list[HeldEvent]]] = field(default_factory=OrderedDict, repr=False)
    _count: int = 0

    def __len__(self) -> int:
        return self._count

    def hold(self, ev: HeldEvent, now: float) -> bool:
        """Keep `ev` for its session's next call; False (dropped) when the table is full."""
        self._expire(now)
        if self._count >= self.max_events:
            self.dropped += 1
            return False
        entry = self._held.get(ev.session_id)
        if entry is None:
            self._held[ev.session_id] = (now, [ev])
        else:
            entry[1].append(ev)
        self._count += 1
        return True

    def take(self, session_id: str, now: float) -> list[HeldEvent]:
        """The session's held events in arrival order (removed); expired ones are dropped first."""
        self._expire(now)
        entry = self._held.pop(session_id, None)
        if entry is None:
            return []
        self._count -= len(entry[1])
        self.applied += len(entry[1])
        return entry[1]

    def _expire(self, now: float) -> None:
        """Drop sessions whose first held event is older than `hold_s` (oldest first)."""
        while self._held:
            sid, (held_at, events) = next(iter(self._held.items()))
            if now - held_at <= self.hold_s:
                return
            del self._held[sid]
            self._count -= len(events)
            self.dropped += len(events)

    def stats(self) -> dict[str, int]:
        return {"held_events": self._count, "held_events_applied": self.applied,
                "held_events_dropped": self.dropped}
