"""How late boundary events reach the scheduler: the engine's clock when an event is applied minus
the event's own timestamp (both wall time, `Event.t`).

The policy decides on the state the events describe (tools in flight, who is in a tool), so this
lag is how stale its view of the tool plane is. Events reach the EngineCore only between two steps
(a utility call), behind the HTTP hop and whatever the engine was computing; the simulators apply
them at once. `/mars/v1/stats` reports it under `event_lag`.
"""
from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field


@dataclass
class EventLag:
    """Count, mean and maximum over every event; median and 90th percentile over the latest
    `window`. A negative lag (the sender's clock ahead of the engine's) counts as 0."""

    window: int = 1000
    count: int = 0
    total_s: float = 0.0
    max_s: float = 0.0
    recent: deque[float] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"EventLag.window must be >= 1, got {self.window}")
        self.recent = deque(maxlen=self.window)

    def observe(self, applied_s: float, event_t: float) -> None:
        lag = max(0.0, applied_s - event_t)
        self.count += 1
        self.total_s += lag
        self.max_s = max(self.max_s, lag)
        self.recent.append(lag)

    def stats(self) -> dict[str, float | int | None]:
        if not self.count:
            return {"events": 0, "mean_s": None, "p50_s": None, "p90_s": None, "max_s": None}
        recent = sorted(self.recent)
        return {"events": self.count, "mean_s": round(self.total_s / self.count, 6),
                "p50_s": round(statistics.median(recent), 6),
                "p90_s": round(recent[min(len(recent) - 1, int(0.9 * len(recent)))], 6),
                "max_s": round(self.max_s, 6)}
