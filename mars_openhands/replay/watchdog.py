"""Notices a replay that can no longer progress: the engine idle while calls wait on it.

ThunderAgent's admission, faithful to its proxy, holds a program larger than its token budget until
its 1800 s resume timeout while the engine has nothing running or waiting (docs/policies.md "When
the engine idles on purpose"). A benchmark must report such a stall, not sit it out.
`StallWatchdog` is fed each timeline sample of a replay and says when the engine has been idle for
`after_s` while calls were outstanding, no tool was running and nothing finished; it also sums the
policy's held-idle time (the engine idle while the policy held calls outside it: what the simulator
counts as `held_idle_s`), at the sampling period's resolution.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: A call the replay has sent and not had answered: (session id, turn index) -> when it was sent.
CallKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class EngineActivity:
    """What an engine has in hand at one sample (`client.engine_activity` reads it)."""

    running: int
    waiting: int               # in the engine's own queues
    held: int | None           # calls the policy holds outside them (parked, overflow); None: unknown

    @property
    def idle(self) -> bool:
        return self.running == 0 and self.waiting == 0


@dataclass(frozen=True, slots=True)
class Stall:
    """Why a replay was ended: the engine sat idle for `idle_s` with these calls outstanding."""

    at_s: float                                   # replay time it was ended
    idle_s: float
    calls: tuple[tuple[str, int, float], ...]     # (session id, turn index, seconds outstanding)
    held: int | None                              # calls the policy held outside the engine
    held_idle_s: float                            # the policy's held-idle time over the whole run

    def describe(self) -> str:
        shown = ", ".join(f"{sid} turn {k} ({waited:.0f} s)" for sid, k, waited in self.calls[:5])
        more = f" and {len(self.calls) - 5} more" if len(self.calls) > 5 else ""
        held = "" if self.held is None else f", {self.held} held by the policy"
        return (f"stalled: engine idle {self.idle_s:.0f} s with {len(self.calls)} call(s) outstanding"
                f"{held}: {shown}{more}; held idle {self.held_idle_s:.0f} s in all; run ended at "
                f"{self.at_s:.0f} s")

    def as_dict(self) -> dict[str, Any]:
        return {"at_s": round(self.at_s, 3), "idle_s": round(self.idle_s, 3), "held": self.held,
                "held_idle_s": round(self.held_idle_s, 3),
                "calls": [{"session_id": sid, "turn": k, "outstanding_s": round(w, 3)} for sid, k, w in self.calls]}


class StallWatchdog:
    """Fed one sample at a time (`observe`); returns a `Stall` once the replay has stalled."""

    def __init__(self, after_s: float) -> None:
        if after_s <= 0:
            raise ValueError(f"StallWatchdog.after_s: must be > 0, got {after_s!r}")
        self.after_s = after_s
        self.held_idle_s = 0.0
        self._last_t: float | None = None
        self._idle_since: float | None = None
        self._progress = -1

    def observe(self, t: float, activity: EngineActivity | None, outstanding: Mapping[CallKey, float],
                progress: int, tools_running: int) -> Stall | None:
        """One sample at replay time `t`: the engine's activity, the calls outstanding (sent at),
        a count of everything the replay finished so far (calls, tools) and the tools running."""
        last, self._last_t = self._last_t, t
        if activity is not None and activity.idle and activity.held and last is not None:
            self.held_idle_s += t - last
        stuck = activity is not None and activity.idle and bool(outstanding) and not tools_running
        moved, self._progress = progress != self._progress, progress
        if not stuck or moved:
            self._idle_since = t if stuck else None
            return None
        if self._idle_since is None:
            self._idle_since = t
        if t - self._idle_since < self.after_s:
            return None
        calls = tuple((sid, k, t - sent) for (sid, k), sent in sorted(outstanding.items(), key=lambda kv: kv[1]))
        assert activity is not None
        return Stall(t, t - self._idle_since, calls, activity.held, self.held_idle_s)
