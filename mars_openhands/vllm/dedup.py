"""Remember recently applied event batches, so a retried `POST /mars/v1/events` is applied once.

A sender that times out on a POST the engine already applied retries it with the same `batch_id`;
applying it again would start or finish the same tools twice. The ids live in the EngineCore
process (see `plugin.mars_events`): the check and the apply run on its busy-loop thread, one
utility call at a time, so a retry that arrives while the first POST is still queued is still
caught, whichever API server process received either.

The memory is a fixed-size LRU of `capacity` ids (a few MiB at the default). That is enough because
a retry only matters within the sender's whole retry span: the agent's emitter gives up on a batch
after 4 attempts with a 2 s timeout (per connect, write and read) plus about 0.35 s of backoff, so
10-25 s. Forgetting an id inside that span takes more than `capacity` other batches in it, over
2,500 POSTs per second for 25 s at the default, far above what one engine's utility channel serves
(each POST is one round trip to the EngineCore).
"""
from __future__ import annotations

from collections import OrderedDict

#: Batch ids remembered per engine (about 100 bytes each).
CAPACITY = 65_536


class AppliedBatches:
    """A bounded LRU of applied batch ids, with the number of replays it turned away."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"capacity: must be at least 1, got {capacity}")
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()
        self.duplicate_batches = 0
        self.duplicate_events = 0

    def seen(self, batch_id: str, events: int) -> bool:
        """True (and counted) if `batch_id` was applied recently; the caller then applies nothing."""
        if batch_id not in self._ids:
            return False
        self._ids.move_to_end(batch_id)
        self.duplicate_batches += 1
        self.duplicate_events += events
        return True

    def add(self, batch_id: str) -> None:
        """Record a batch once it was applied (a refused batch stays retryable)."""
        self._ids[batch_id] = None
        self._ids.move_to_end(batch_id)
        while len(self._ids) > self.capacity:
            self._ids.popitem(last=False)

    def __len__(self) -> int:
        return len(self._ids)

    def counters(self) -> dict[str, int]:
        return {"duplicate_batches": self.duplicate_batches, "duplicate_events": self.duplicate_events}
