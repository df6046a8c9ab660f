"""LRU cache with time-to-live."""

from ttlcache.cache import LRUCache
from ttlcache.clock import Clock, ManualClock, MonotonicClock
from ttlcache.stats import CacheStats

__all__ = ["CacheStats", "Clock", "LRUCache", "ManualClock", "MonotonicClock"]
