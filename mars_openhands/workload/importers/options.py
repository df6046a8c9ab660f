"""What the importers share: the user's choices and the tool calls that stand for waiting.

A human wait (the agent handed back to its user) and a wait for a sub-agent are kept as tool calls,
named `human` and `subagent`, that hold almost none of the host's cores (`WAIT_CORES`): the session
is idle for that long, yet no host process runs. A cut session (`human="split"`) goes on as a new
session, `<id>#2`, `<id>#3`, ..., arriving when its user spoke.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mars_openhands.workload.trace import ToolCall

#: Cores a wait holds: not 0, which `mars-trace/1` reads as 1 core.
WAIT_CORES = 0.01


@dataclass(frozen=True, slots=True)
class ImportOptions:
    #: keep a human's turn as a `human` wait, or cut the session there
    human: Literal["wait", "split"] = "wait"
    #: sub-agent groups (Weka) become sessions of their own, or are dropped
    subagents: Literal["session", "drop"] = "session"
    #: Poisson arrival rate (sessions/s) for formats without arrival times
    rate: float = 0.2
    seed: int = 0
    #: Weka: the session files read, by the number in their name (`trace_0042.json`: 42). The
    #: even-numbered Claude Code sessions are this project's tuning set; the odd ones stay unread
    #: so that they remain a fair check (docs/workload.md)
    numbers: Literal["all", "even", "odd"] = "all"
    #: cap on each wait between calls (s), as trace replayers cap idle time; None: as recorded
    max_gap_s: float | None = None

    def gap(self, seconds: float) -> float:
        """A recorded wait under `max_gap_s`."""
        return seconds if self.max_gap_s is None else min(seconds, self.max_gap_s)


def wait_call(name: str, duration_s: float) -> ToolCall:
    """A wait of `duration_s` (at least 0, rounded to 1 ms) that keeps no host core busy."""
    return ToolCall(name=name, duration_s=round(max(0.0, duration_s), 3), cpu_cores=WAIT_CORES)


def part_id(session_id: str, part: int) -> str:
    """The id of part `part` (1 = the first, which keeps the session's id) of a cut session."""
    return session_id if part == 1 else f"{session_id}#{part}"
