"""The cache itself: an ordered mapping, oldest use first."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

from ttlcache.clock import Clock, MonotonicClock
from ttlcache.stats import CacheStats

_MISSING = object()


class LRUCache:
    """Holds at most ``capacity`` entries; the least recently used one is evicted first.

    With ``ttl`` set, an entry older than ``ttl`` seconds is treated as absent.
    """

    def __init__(self, capacity: int, ttl: float | None = None, clock: Clock | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        if ttl is not None and ttl <= 0:
            raise ValueError(f"ttl must be positive, got {ttl}")
        self.capacity = capacity
        self.ttl = ttl
        self.clock = clock or MonotonicClock()
        self.stats = CacheStats()
        self._entries: OrderedDict[Hashable, tuple[Any, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        entry = self._entries.get(key)
        return entry is not None and not self._expired(entry)

    def _expired(self, entry: tuple[Any, float]) -> bool:
        return self.ttl is not None and self.clock.now() - entry[1] >= self.ttl

    def get(self, key: Hashable, default: Any = None) -> Any:
        entry = self._entries.get(key, _MISSING)
        if entry is _MISSING:
            self.stats.misses += 1
            return default
        if self._expired(entry):
            del self._entries[key]
            self.stats.expirations += 1
            self.stats.misses += 1
            return default
        self.stats.hits += 1
        return entry[0]

    def put(self, key: Hashable, value: Any) -> None:
        if key in self._entries:
            self._entries.move_to_end(key)
        self._entries[key] = (value, self.clock.now())
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
            self.stats.evictions += 1

    def pop(self, key: Hashable, default: Any = None) -> Any:
        entry = self._entries.pop(key, _MISSING)
        return default if entry is _MISSING else entry[0]

    def keys(self) -> list[Hashable]:
        """Live keys, least recently used first."""
        return [k for k, entry in self._entries.items() if not self._expired(entry)]
