"""Queue waits of one simulated run, from its events: what `report.queues` reads to say whether a
cell's host makes work wait."""
from __future__ import annotations

from mars_openhands.events import Event, PrefillStarted, ToolFinished, TurnSubmitted


class QueueWaits:
    """Summed waits of one run: submission -> first prefill (engine queue and admission parking)
    and the tool pool's queue."""

    def __init__(self) -> None:
        self.submitted: dict[str | None, float] = {}
        self.engine_s = 0.0
        self.tool_s = 0.0

    def __call__(self, e: Event) -> None:
        if isinstance(e, TurnSubmitted):
            self.submitted[e.request_id] = e.t
        elif isinstance(e, PrefillStarted):
            t0 = self.submitted.pop(e.request_id, None)
            if t0 is not None:
                self.engine_s += e.t - t0
        elif isinstance(e, ToolFinished):
            self.tool_s += e.queue_wait_s
