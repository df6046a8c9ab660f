"""Safe degradation when boundary events stop: silent sessions give their window slot back, and
sessions silent for long are forgotten.

An admitted session with no call in the engine and no tool known to run gives its slot back after
`idle_release_s`, so admission degrades safely when no session_ended ever comes; its next call is
still never parked. A tool known to run keeps the slot up to `stale_tool_s`, unless the session
roams (its calls skip turn indices here, so they and its events also go to other replicas: the
tool's end may be reported elsewhere); a session silent for `forget_after_s` is forgotten.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from mars_openhands.core.context import PolicyContext
from mars_openhands.core.model import Session


@dataclass
class IdleRelease:
    """The three silences (see the module docstring) and when the next scan is due."""

    idle_release_s: float = 30.0
    stale_tool_s: float = 3600.0
    forget_after_s: float = 3600.0
    #: Seconds between scans (`due`): a scan visits every known session.
    scan_interval_s: float = 1.0
    _next_scan: float = field(default=-math.inf, repr=False)

    def due(self, now: float) -> bool:
        """True once every `scan_interval_s` (the caller then scans)."""
        if now < self._next_scan:
            return False
        self._next_scan = now + self.scan_interval_s
        return True

    def scan(self, ctx: PolicyContext, now: float) -> tuple[list[Session], list[str]]:
        """Give back the slots of silent sessions and forget long-silent ones (out of
        `ctx.sessions`): (the sessions released, the ids forgotten)."""
        slots, released, forget = ctx.slots, [], []
        for s in ctx.sessions.values():
            if s.turns != s.turns_finished or s.last_turn_finished_s is None:
                continue                                   # a call is in the engine or parked
            idle = now - s.last_turn_finished_s
            if s.holds_slot and idle >= (self.idle_release_s if s.in_tool is None or s.roaming
                                         else self.stale_tool_s):
                slots.give_back(s)
                released.append(s)
            if idle >= self.forget_after_s and ctx.pins.get(s.session_id) is None:
                forget.append(s.session_id)
        for sid in forget:
            slots.give_back(ctx.sessions.pop(sid))
        return released, forget
