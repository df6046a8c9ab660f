"""N `mars-openhands serve` replicas and `vllm-router` in front of them, started and stopped as one.

Replicas start together (each waits for its own `/health`), then the router over their URLs. While
running, a replica that exits is reported once and left to the router's failover (its sessions move
to a survivor, where MARS treats them as new); the cluster stops when the router or every replica is
gone. Stopping takes the router down first (no new calls), then every replica's process group
(`mars_openhands.procs`): `mars-openhands serve` forwards SIGTERM to vLLM's own process group and
takes it down with it, and vLLM gets SIGTERM if the launcher dies (`PR_SET_PDEATHSIG`), so stopping
the launcher's group leaves nothing of a replica behind.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from mars_openhands.cluster.router import DEFAULT_POLICY, router_command
from mars_openhands.procs import ChildServer, free_port
from mars_openhands.vllm.serve import serve_command


@dataclass
class ClusterSpec:
    """What to start: `replicas` engines under `policy`, the router on `host:port`."""

    replicas: int
    policy: str
    model: Path
    log_dir: Path
    host: str = "127.0.0.1"
    port: int = 8000
    replica_ports: list[int] = field(default_factory=list)   # default: port + 1, port + 2, ...
    router_policy: str = DEFAULT_POLICY
    vllm_args: list[str] = field(default_factory=list)
    router_args: list[str] = field(default_factory=list)
    gpus_per_replica: int = 0          # > 0: replica i sees GPUs [i*g, (i+1)*g) (CUDA_VISIBLE_DEVICES)
    cpu_cores_per_replica: int = 0     # > 0: replica i binds its threads to cores [i*c, (i+1)*c)
    prometheus_port: int | None = None

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"replicas: must be >= 1, got {self.replicas}")
        if not self.replica_ports:
            self.replica_ports = [self.port + 1 + i for i in range(self.replicas)]
        if len(self.replica_ports) != self.replicas:
            raise ValueError(f"replica ports: {len(self.replica_ports)} given for {self.replicas} replicas")
        if self.port in self.replica_ports or len(set(self.replica_ports)) != self.replicas:
            raise ValueError(f"ports: the router's {self.port} and the replicas' {self.replica_ports} "
                             "must all differ")

    def replica_env(self, i: int) -> dict[str, str]:
        env = {}
        if self.gpus_per_replica > 0:
            g = self.gpus_per_replica
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in range(i * g, (i + 1) * g))
        if self.cpu_cores_per_replica > 0:
            c = self.cpu_cores_per_replica
            env["VLLM_CPU_OMP_THREADS_BIND"] = f"{i * c}-{(i + 1) * c - 1}"
        return env


class Cluster:
    """The replicas and the router of one `ClusterSpec`."""

    def __init__(self, spec: ClusterSpec, python: str = sys.executable,
                 say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)) -> None:
        self.spec, self.say = spec, say
        spec.log_dir.mkdir(parents=True, exist_ok=True)
        self.replicas = [
            ChildServer(f"replica {i}", serve_command(python, spec.policy, spec.model, port, spec.vllm_args),
                        f"http://127.0.0.1:{port}", spec.log_dir / f"replica-{i}.log",
                        env={"VLLM_HOST_IP": "127.0.0.1", **spec.replica_env(i)})
            for i, port in enumerate(spec.replica_ports)]
        local = "127.0.0.1" if spec.host in ("0.0.0.0", "::") else spec.host
        self.url = f"http://{local}:{spec.port}"
        self.metrics_port = spec.prometheus_port or free_port()
        self.router = ChildServer(
            "vllm-router",
            router_command([r.url for r in self.replicas], policy=spec.router_policy, host=spec.host,
                           port=spec.port, prometheus_port=self.metrics_port,
                           extra=spec.router_args),
            self.url, spec.log_dir / "router.log")
        self._reported: set[int] = set()

    @property
    def replica_urls(self) -> list[str]:
        return [r.url for r in self.replicas]

    def start(self, timeout_s: float = 900.0) -> None:
        """Every replica healthy, then the router; on any failure everything started is stopped."""
        pool = ThreadPoolExecutor(len(self.replicas))
        try:
            for future in as_completed([pool.submit(r.start, timeout_s) for r in self.replicas]):
                future.result()              # the first replica that fails stops the lot at once
            self.router.start(60.0)
        except BaseException:
            self.stop()
            raise
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def check(self) -> bool:
        """Report replicas that exited (once each); False once the router or every replica is gone."""
        for i, r in enumerate(self.replicas):
            if i not in self._reported and not r.alive():
                self._reported.add(i)
                self.say(f"cluster: replica {i} ({r.url}) exited with status {r.returncode}; the router moves "
                         f"its sessions to the others (log: {r.log_path})")
        if not self.router.alive():
            self.say(f"cluster: the router exited; last log lines:\n{self.router.log_tail()}")
            return False
        return len(self._reported) < len(self.replicas)

    def stop(self) -> None:
        """The router first (no new calls), then every replica's process group, together."""
        self.router.stop()
        with ThreadPoolExecutor(len(self.replicas)) as pool:
            list(pool.map(lambda r: r.stop(), self.replicas))

    def run(self, poll_s: float = 1.0) -> int:
        """Block until Ctrl-C / SIGTERM (exit 0) or until the cluster can serve no more (exit 1)."""
        while self.check():
            time.sleep(poll_s)
        return 1
