"""The tool calls each session has counted on the tool plane (`CpuState.tools_in_flight`).

Tool events may reach a replica that did not see the tool start (behind a router): a finish without
its start here changes nothing, and a session ended or forgotten here takes its own calls out, as
does a session whose next call arrives before its tools' finish events (a late finish then changes
nothing).
"""
from __future__ import annotations

from collections import Counter

from mars_openhands.core.model import CpuState
from mars_openhands.events import ToolCancelled, ToolFinished, ToolStarted


class ToolPlaneCount:
    """Per-session counts behind `CpuState.tools_in_flight`, kept in step with it."""

    def __init__(self) -> None:
        self._by_session: Counter[str] = Counter()

    def observe(self, ev: ToolStarted | ToolFinished | ToolCancelled, cpu: CpuState) -> None:
        """A real tool event: count its start, uncount its end if its start was counted here, and
        feed a finished call's queue wait to the wait EMA."""
        if isinstance(ev, ToolStarted):
            cpu.tools_in_flight += 1
            self._by_session[ev.session_id] += 1
            return
        counted = self._by_session[ev.session_id]
        if counted:
            self._by_session[ev.session_id] = counted - 1
            if counted == 1:
                del self._by_session[ev.session_id]
            cpu.tools_in_flight = max(0, cpu.tools_in_flight - 1)
        if isinstance(ev, ToolFinished):
            cpu.observe_wait(ev.queue_wait_s)

    def forget(self, session_id: str, cpu: CpuState) -> None:
        """Take a session's counted tools off the tool plane (it ended or was forgotten here, or its
        next call arrived)."""
        n = self._by_session.pop(session_id, 0)
        if n:
            cpu.tools_in_flight = max(0, cpu.tools_in_flight - n)
