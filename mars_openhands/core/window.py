"""The active window: at most `Policy.max_active` calls in the engine, the rest in an FCFS queue.

MARS' internal scheduler keeps its active set (running + waiting) small so that its MLFQ ranks a
few calls well instead of many badly; admitted calls beyond the window wait outside the engine's
queues, first come first served, and enter as room frees up. Both engines keep one
`ActiveWindow` over their own request type and ask it at the same two points: when an admitted
call arrives (`enter`) and before each step (`refill`).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

R = TypeVar("R")


class ActiveWindow(Generic[R]):
    """The FCFS overflow queue in front of an engine's active set.

    `limit()` is the window size (None: unbounded), read at every decision so an engine whose
    policy changes keeps one window; `active` is the caller's count of running + waiting calls.
    """

    __slots__ = ("limit", "overflow")

    def __init__(self, limit: Callable[[], int | None]) -> None:
        self.limit = limit
        self.overflow: deque[R] = deque()

    def __len__(self) -> int:
        return len(self.overflow)

    def __bool__(self) -> bool:
        return bool(self.overflow)

    def __iter__(self) -> Iterator[R]:
        return iter(self.overflow)

    def enter(self, item: R, active: int) -> bool:
        """True: `item` joins the engine's queues now. False: the window is full (or others wait
        before it), so it was queued here."""
        limit = self.limit()
        if limit is not None and (self.overflow or active >= limit):
            self.overflow.append(item)
            return False
        return True

    def refill(self, active: int) -> list[R]:
        """The queued calls that fit now, oldest first, taken off the queue."""
        overflow = self.overflow
        if not overflow:
            return []
        limit = self.limit()
        room = len(overflow) if limit is None else limit - active
        return [overflow.popleft() for _ in range(min(room, len(overflow)))]

    def remove(self, match: Callable[[R], bool]) -> list[R]:
        """Take the queued calls `match` selects (aborts) off the queue, in queue order."""
        keep: deque[R] = deque()
        gone: list[R] = []
        for item in self.overflow:
            (gone if match(item) else keep).append(item)
        self.overflow = keep
        return gone
