"""A child server (a replica's `mars-openhands serve`, the router) in its own process group.

Started with its output in a log file, healthy once `GET /health` answers 200, stopped with SIGTERM
to its group and SIGKILL after a grace period. `mars-openhands serve` itself forwards SIGTERM to
vLLM's own process group and takes it down with it, and vLLM gets SIGTERM if the launcher dies
(`PR_SET_PDEATHSIG`), so stopping the launcher's group leaves nothing of a replica behind.
"""
from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import httpx

from mars_openhands.stopping import stop_group


class ProcessError(RuntimeError):
    """A child did not come up (the message names it and carries the tail of its log)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ManagedProcess:
    def __init__(self, name: str, command: list[str], url: str, log_path: Path,
                 env: dict[str, str] | None = None) -> None:
        self.name, self.command, self.url, self.log_path = name, command, url, log_path
        self.env = env or {}
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float) -> None:
        """Start it and wait for `/health`; on failure it is stopped and `ProcessError` says why."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                raise ProcessError(f"{self.name} exited with status {code} before /health answered; "
                                   f"last log lines ({self.log_path}):\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        raise ProcessError(f"{self.name} not healthy after {timeout_s:.0f} s; last log lines "
                           f"({self.log_path}):\n{self.log_tail()}")

    @property
    def returncode(self) -> int | None:
        """None while it runs (or before it started)."""
        return None if self.proc is None else self.proc.poll()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM its process group, SIGKILL whatever is left of the group after `grace_s`."""
        if self.proc is not None:
            stop_group(self.proc, grace_s)
