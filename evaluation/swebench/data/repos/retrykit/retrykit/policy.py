"""How many times to try and how long to wait in between."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 3
    base_delay: float = 0.1
    max_delay: float = 10.0
    multiplier: float = 2.0
    jitter: float = 0.0  # fraction of the delay added at random, 0..1
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.base_delay < 0 or self.max_delay < self.base_delay:
            raise ValueError("need 0 <= base_delay <= max_delay")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be within 0..1, got {self.jitter}")

    def delay(self, retry_number: int) -> float:
        """Seconds to wait before retry ``retry_number`` (1 = the first retry)."""
        raw = self.base_delay * self.multiplier ** (retry_number - 1)
        capped = min(raw, self.max_delay)
        return capped + capped * self.jitter * self.rng.random()
