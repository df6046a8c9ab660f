"""The scheduler's queues as the policy sees them: the victim hook on `running`, and a lazy view
of a vLLM queue as the policy's requests."""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from vllm.v1.request import Request

from mars_openhands.core import Request as CoreRequest
from mars_openhands.vllm.request_table import TrackedRequest


class VictimList(list):
    """`Scheduler.running` whose argument-less `pop()` asks the policy for the victim."""

    __slots__ = ("chooser",)

    def __init__(self, items: Iterable[Request] = (), chooser=None) -> None:
        super().__init__(items)
        self.chooser = chooser

    def pop(self, index: int = -1) -> Request:  # type: ignore[override]
        if index == -1 and self.chooser is not None:
            victim = self.chooser(self)
            if victim is not None:
                return victim
        return super().pop(index)


class CoreView(Sequence):
    """The policy's view of a vLLM queue, built only if a strategy actually reads it."""

    def __init__(self, queue: Iterable[Request], records: dict[str, TrackedRequest]) -> None:
        self._queue, self._records = queue, records
        self._items: list[CoreRequest] | None = None

    def _list(self) -> list[CoreRequest]:
        if self._items is None:
            records = self._records
            self._items = [records[r.request_id].core for r in self._queue if r.request_id in records]
        return self._items

    def __len__(self) -> int:
        return len(self._list())

    def __bool__(self) -> bool:
        # (the MLFQ asks at every step whether a call waits: no list for that)
        if self._items is not None:
            return bool(self._items)
        records = self._records
        return any(r.request_id in records for r in self._queue)

    def __getitem__(self, i):
        return self._list()[i]
