"""`mars_*` Prometheus metrics next to vLLM's own, from the scheduler's stats dictionary.

`SchedulerStats` travels over ZMQ as a fixed struct, so custom telemetry takes its own channel:
the API server polls `mars_stats()` and this collector exposes the last answer. Numbers become
gauges (`mars_<path>`), the adapter's event counters become counters (`mars_<name>_total`).
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector


def flatten(stats: dict, prefix: str = "mars") -> Iterator[tuple[str, float]]:
    """Numeric leaves of a nested dict as (metric name, value); booleans count as 0/1."""
    for key, value in stats.items():
        name = f"{prefix}_{key}".replace("-", "_").replace(".", "_")
        if isinstance(value, dict):
            yield from flatten(value, name)
        elif isinstance(value, bool):
            yield name, float(value)
        elif isinstance(value, (int, float)):
            yield name, float(value)


class MarsCollector(Collector):
    _instance: MarsCollector | None = None

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats: dict[str, Any] = {}
        self._stale = True

    @classmethod
    def install(cls) -> MarsCollector:
        """Register once in the registry vLLM's `/metrics` serves (idempotent per process)."""
        if cls._instance is None:
            from vllm.v1.metrics.prometheus import get_prometheus_registry
            cls._instance = cls()
            get_prometheus_registry().register(cls._instance)
        return cls._instance

    def update(self, stats: dict) -> None:
        with self._lock:
            self._stats, self._stale = dict(stats), False

    def mark_stale(self) -> None:
        with self._lock:
            self._stale = True

    def collect(self):
        with self._lock:
            stats, stale = self._stats, self._stale
        policy = str(stats.get("policy", ""))
        up = GaugeMetricFamily("mars_stats_fresh", "1 if the last poll of the engine succeeded",
                               labels=["policy"])
        up.add_metric([policy], 0.0 if stale else 1.0)
        yield up
        counters = stats.get("counters", {})
        for name, value in flatten({k: v for k, v in stats.items() if k != "counters"}):
            g = GaugeMetricFamily(name, f"MARS scheduler state {name[5:]}", labels=["policy"])
            g.add_metric([policy], value)
            yield g
        for key, value in sorted(counters.items()):
            c = CounterMetricFamily(f"mars_{key}", f"MARS scheduler events: {key}", labels=["policy"])
            c.add_metric([policy], float(value))
            yield c
