"""`bench-engine --replicas N`: each policy behind `vllm-router`, per routing setup, on real engines.

One configuration = N `mars-openhands serve` replicas under one policy plus the router in front
(`mars_openhands.cluster.launch`, as `cluster serve` starts them), replayed through the router:

one configuration per `--router-policy` choice (`cluster.router`), for example
- `consistent_hash` or `sticky_least_loaded`: session affinity on `X-Session-ID`;
- `round_robin`: the router's per-request round robin (what affinity is worth);
- `program`: stock FCFS replicas behind the router's own agent-aware mode (program scheduling).

The replay client sends `X-Session-ID` on every call and posts each session's events in a POST of
their own (`events.by_session`), so events follow their session. Calls that fail (a replica died)
are retried as an agent's LLM client would, and counted. `--kill-replica-after S` stops the last
replica S seconds into each replay: the sessions it held (asked before the kill) that later show a
history on a survivor count as moved. Each replica's `/mars/v1/stats` is fetched at the end and
summed (`cluster.stats.aggregate`); engine counters of a killed replica are lost with it.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from mars_openhands.cluster.launch import Cluster, ClusterSpec
from mars_openhands.cluster.router import PROGRAM, ROUTER_POLICIES
from mars_openhands.cluster.stats import aggregate, fetch
from mars_openhands.procs import free_port
from mars_openhands.protocol import STATS_PATH

#: The engines' policy behind the router's program scheduling: stock FCFS.
PROGRAM_POLICY = "fcfs"


@dataclass(frozen=True)
class Configuration:
    policy: str
    router: str

    @property
    def label(self) -> str:
        return f"{self.policy}@{self.router}"


def configurations(policies: list[str], routers: list[str]) -> list[Configuration]:
    """Every policy behind every router; `program` only with stock FCFS engines (once)."""
    unknown = [r for r in routers if r not in ROUTER_POLICIES]
    if unknown:
        raise ValueError(f"--router-policy: unknown router policy {', '.join(map(repr, unknown))}; "
                         f"known: {', '.join(ROUTER_POLICIES)}")
    if not routers or len(set(routers)) != len(routers):
        raise ValueError(f"--router-policy: name each router policy once, got {routers}")
    out = []
    for router in routers:
        if router == PROGRAM:
            out.append(Configuration(PROGRAM_POLICY, router))
        else:
            out.extend(Configuration(p, router) for p in policies)
    return out


def cluster_spec(conf: Configuration, replicas: int, model: Path, log_dir: Path, vllm_flags: list[str],
                 cpu_cores_per_replica: int = 0) -> ClusterSpec:
    """The replicas and router of one configuration, on free ports."""
    return ClusterSpec(replicas=replicas, policy=conf.policy, model=model, log_dir=log_dir, port=free_port(),
                       replica_ports=[free_port() for _ in range(replicas)], router_policy=conf.router,
                       vllm_args=list(vllm_flags),
                       cpu_cores_per_replica=cpu_cores_per_replica)


@dataclass
class Failover:
    """What killing one replica cost: the calls that failed (and were retried), the sessions that
    were on it when it died and the ones of those that went on on a survivor."""

    killed: str | None = None
    at_s: float | None = None
    on_killed: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    failed_calls: int = 0
    sessions_failed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"killed": self.killed, "at_s": self.at_s, "sessions_on_killed": len(self.on_killed),
                "sessions_moved": len(self.moved), "failed_calls": self.failed_calls,
                "sessions_failed": self.sessions_failed}


def sessions_on(url: str, session_ids: list[str], timeout_s: float = 5.0) -> list[str]:
    """The sessions of which the replica at `url` keeps a history (`/mars/v1/stats?session=`);
    none when it does not answer."""
    out: list[str] = []
    with httpx.Client(base_url=url.rstrip("/"), timeout=timeout_s) as client:
        for sid in session_ids:
            try:
                r = client.get(STATS_PATH, params={"session": sid})
            except httpx.HTTPError:
                return []
            if r.status_code == 200 and r.json().get("history"):
                out.append(sid)
    return out


class Killer:
    """Stops replica `index` of a running cluster `after_s` seconds after `start()`, first noting
    which sessions it holds; `join()` waits for it (a no-op when the replay ended first)."""

    def __init__(self, cluster: Cluster, index: int, after_s: float, session_ids: list[str],
                 failover: Failover, clock: Callable[[], float]) -> None:
        self.cluster, self.index, self.after_s = cluster, index, after_s
        self.session_ids, self.failover, self.clock = session_ids, failover, clock
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        if self._cancel.wait(self.after_s):
            return
        victim = self.cluster.replicas[self.index]
        self.failover.on_killed = sessions_on(victim.url, self.session_ids)
        self.failover.killed, self.failover.at_s = victim.url, round(self.clock(), 3)
        victim.stop(grace_s=0.0)

    def join(self) -> None:
        self._cancel.set()
        self._thread.join()

    def moved(self) -> None:
        """After the replay: which of the killed replica's sessions have a history on a survivor."""
        survivors = [r.url for i, r in enumerate(self.cluster.replicas) if i != self.index]
        on_survivors = {sid for url in survivors for sid in sessions_on(url, self.failover.on_killed)}
        self.failover.moved = [sid for sid in self.failover.on_killed if sid in on_survivors]


async def summed_metrics(urls: list[str]) -> dict[str, float]:
    """Every reachable replica's Prometheus metrics, summed name by name."""
    from mars_openhands.replay.engine import parse_prometheus

    total: dict[str, float] = {}
    async with httpx.AsyncClient(timeout=5.0) as client:
        for url in urls:
            try:
                r = await client.get(url.rstrip("/") + "/metrics")
                r.raise_for_status()
            except httpx.HTTPError:
                continue
            for k, v in parse_prometheus(r.text).items():
                total[k] = total.get(k, 0.0) + v
    return total


def cluster_stats(urls: list[str]) -> dict[str, Any]:
    """{"replicas": each replica's stats (or why none), "total": their sum}."""
    per = fetch(urls)
    return {"replicas": per, "total": aggregate(per)}


def replica_table(summaries: dict[str, dict[str, Any]], failovers: dict[str, Failover]) -> str:
    """Mean / p95 E2E of each configuration with what failover cost it."""
    head = ("configuration", "done", "mean E2E s", "p95 E2E s", "failed calls", "on killed", "moved")
    rows = [head]
    for name, s in summaries.items():
        f = failovers[name]
        rows.append((name, str(s["completed"]), f"{s['mean_e2e_s']:.1f}", f"{s['p95_e2e_s']:.1f}",
                     str(f.failed_calls), str(len(f.on_killed)) if f.killed else "-",
                     str(len(f.moved)) if f.killed else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     for r in rows)
