"""Sample the engine's `/mars/v1/stats` while a run goes on: the source of the timeline plots.

Each sample is one JSON line `{"t": unix time, "stats": <the endpoint's JSON>}` in
`RUN_DIR/engine_stats.jsonl`; the last one is also written to `engine_stats.json`. An engine
without the endpoint (a plain vLLM, a remote model API) is noted once and not sampled.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import httpx

from evaluation.swebench.records import JSONDict
from mars_openhands.protocol import STATS_PATH

log = logging.getLogger("evaluation.swebench.runs.engine_stats")



class StatsSampler:
    """A daemon thread polling the stats endpoint every `interval_s` until `close()`."""

    def __init__(self, engine_url: str, run_dir: Path, interval_s: float = 1.0):
        self.url = engine_url.rstrip("/") + STATS_PATH
        self.out = run_dir / "engine_stats.jsonl"
        self.last = run_dir / "engine_stats.json"
        self.interval_s = interval_s
        self.samples = 0
        self.available = True
        self._stop = threading.Event()
        self._client = httpx.Client(timeout=5.0, trust_env=False)
        self._thread = threading.Thread(target=self._run, name="engine-stats", daemon=True)

    def start(self) -> StatsSampler:
        self._thread.start()
        return self

    def sample(self) -> JSONDict | None:
        try:
            r = self._client.get(self.url)
        except httpx.HTTPError as e:
            log.debug("engine stats: %s", e)
            return None
        if r.status_code == 404:
            self.available = False
            log.warning("engine at %s has no %s: no engine timeline for this run", self.url, STATS_PATH)
            return None
        if r.status_code != 200:
            return None
        stats: JSONDict = r.json()
        with self.out.open("a") as f:
            f.write(json.dumps({"t": time.time(), "stats": stats}) + "\n")
        self.last.write_text(json.dumps(stats, indent=2) + "\n")
        self.samples += 1
        return stats

    def _run(self) -> None:
        while self.available and not self._stop.wait(self.interval_s):
            self.sample()

    def close(self) -> None:
        """Take a final sample (the run's totals) and stop."""
        self._stop.set()
        self._thread.join(timeout=10)
        if self.available:
            self.sample()
        self._client.close()
