"""The simulator's future: session arrivals, tool completions and wake-ups, in time order."""
from __future__ import annotations

import heapq

from mars_openhands.sim.kv import INF

#: Kinds of happenings. A wake-up carries nothing: it only makes the engine look again (a pin
#: expires, the admission control loop is due).
ARRIVE, TOOL_DONE, WAKE = 0, 1, 2


class EventQueue:
    """A heap of (time, sequence, kind, object); ties pop in the order they were pushed."""

    __slots__ = ("heap", "_seq")

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, int, object]] = []
        self._seq = 0

    def __bool__(self) -> bool:
        return bool(self.heap)

    def push(self, t: float, kind: int, obj: object = None) -> None:
        self._seq += 1
        heapq.heappush(self.heap, (t, self._seq, kind, obj))

    def wake_at(self, t: float, now: float) -> None:
        """A wake-up at `t` if it lies in the future and is finite."""
        if now < t < INF:
            self.push(t, WAKE)

    def next_s(self) -> float:
        """Time of the next happening (INF when none is left)."""
        return self.heap[0][0] if self.heap else INF

    def only_wakes_left(self) -> bool:
        """Nothing but one wake-up is left (an idle engine waiting on its control loop)."""
        heap = self.heap
        return len(heap) == 1 and heap[0][2] == WAKE

    def pop_due(self, t: float) -> tuple[float, int, object] | None:
        """The next happening at or before `t` (time, kind, object), or None."""
        heap = self.heap
        if heap and heap[0][0] <= t:
            et, _, kind, obj = heapq.heappop(heap)
            return et, kind, obj
        return None
