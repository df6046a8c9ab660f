"""`vllm-router` (the `vllm-router` package: a Rust router with a Python launcher) as a child process.

Both affinity policies key a session on the first non-empty header of `x-session-id`,
`x-user-id`, ..., so every request of a session that carries `X-Session-ID` reaches one replica,
paths the router does not know (`/mars/v1/*`) included. It does not pass that header on for those
paths, which is why every MARS event names its session in the body.

- `sticky_least_loaded` (the default, chosen by measurement: docs/cluster.md "Choosing the router
  policy") places a new session on the replica with the fewest sessions and keeps it there until
  `POST /finish_session?session_id=...` (sent by the MARS event emitter after a delivered
  `session_ended`) or 2 hours of silence; a session whose replica is down is placed again.
- `consistent_hash` hashes the session onto a ring of workers, whatever their load.
- `program`: `consistent_hash` with the router's own agent-aware mode, `--enable-program-scheduling`,
  programs identified by `X-Session-ID` (`program_scheduling_enable_key: auto`; with the default
  key only requests carrying `vllm_xargs.agentic_context` are program-scheduled, checked with
  vllm-router 0.1.17).

`ROUTER_POLICIES` is the one vocabulary of `--router-policy` (`cluster serve`, `bench-engine`,
`simulate --replicas`); the simulator models some of them (`sim/routing.py`).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

#: `--policy` values of vllm-router 0.1.17.
VLLM_ROUTER_POLICIES = ("consistent_hash", "round_robin", "random", "cache_aware", "kv_aware", "power_of_two",
                        "sticky_least_loaded")
#: The router's program scheduling over consistent hashing, programs keyed on `X-Session-ID`.
PROGRAM = "program"
_PROGRAM_SETUP = ("consistent_hash", ("--enable-program-scheduling", "--program-scheduling-config-json",
                                      json.dumps({"program_scheduling_enable_key": "auto"})))
#: Every `--router-policy` choice: vllm-router's policies, and `program`.
ROUTER_POLICIES = (*VLLM_ROUTER_POLICIES, PROGRAM)
#: Default routing: session affinity on `X-Session-ID`, new sessions to the replica with the fewest.
DEFAULT_POLICY = "sticky_least_loaded"


def router_setup(name: str) -> tuple[str, tuple[str, ...]]:
    """vllm-router's `--policy` and extra flags for a `--router-policy` choice."""
    if name == PROGRAM:
        return _PROGRAM_SETUP
    if name not in VLLM_ROUTER_POLICIES:
        raise ValueError(f"router policy {name!r} unknown; known: {', '.join(ROUTER_POLICIES)}")
    return name, ()


class RouterError(RuntimeError):
    """vllm-router is not installed."""


def router_executable() -> str:
    """The `vllm-router` script next to this interpreter, else on PATH."""
    local = Path(sys.executable).parent / "vllm-router"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    found = shutil.which("vllm-router")
    if found is None:
        raise RouterError("vllm-router not found; it is a dependency of the engine environment: "
                          "`make setup-engine`, or `pip install vllm-router`")
    return found


def router_command(worker_urls: Sequence[str], *, policy: str = DEFAULT_POLICY, host: str = "127.0.0.1",
                   port: int = 8000, prometheus_port: int | None = None, health_interval_s: int = 5,
                   extra: Sequence[str] = (), executable: str | None = None) -> list[str]:
    """The router's command line over `worker_urls` (replicas already healthy: checked every second),
    routing by `policy`, a `--router-policy` choice.

    `health_interval_s`: the router's own health checks of the replicas (two failures mark one down;
    its circuit breaker acts on failed requests sooner)."""
    if not worker_urls:
        raise ValueError("router_command: at least one worker URL is needed")
    policy, setup = router_setup(policy)
    cmd = [executable or router_executable(), "--worker-urls", *worker_urls, "--policy", policy,
           "--host", host, "--port", str(port), "--worker-startup-check-interval", "1",
           "--health-check-interval-secs", str(health_interval_s), "--health-failure-threshold", "2",
           "--log-level", "warning"]
    if prometheus_port is not None:
        cmd += ["--prometheus-port", str(prometheus_port)]
    return cmd + list(setup) + list(extra)
