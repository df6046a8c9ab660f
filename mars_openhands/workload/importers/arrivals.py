"""Session arrival times: drawn (Poisson) where a format has none, read (ISO 8601) where it has."""
from __future__ import annotations

import random
from datetime import UTC, datetime


def poisson_arrivals(n: int, rate: float, seed: int) -> list[float]:
    """`n` start times (s) of a Poisson process at `rate` sessions/s, the first at 0, rounded to 1 ms.

    Seeded on its own stream, so the same seed gives the same arrivals whatever the sessions hold.
    """
    if not rate > 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    rng = random.Random(f"mars-import:{seed}:arrivals")
    times, t = [], 0.0
    for i in range(n):
        if i:
            t += rng.expovariate(rate)
        times.append(round(t, 3))
    return times


def iso_seconds(text: str) -> float | None:
    """Seconds since the epoch of an ISO 8601 timestamp (`Z` or an offset; none: UTC), or None."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()
