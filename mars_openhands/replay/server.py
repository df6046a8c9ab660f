"""One `mars-openhands serve` engine per policy: start it in its own process group, wait for
`/health`, and stop the whole group (and anything that escaped it) so no server outlives a run."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


class ServerError(RuntimeError):
    """The engine did not come up (the message carries the tail of its log)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid: int) -> list[int]:
    """All live descendants of `pid` (from /proc), children before grandchildren."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, frontier = [], [pid]
    while frontier:
        nxt = [c for p in frontier for c in children.get(p, [])]
        out.extend(nxt)
        frontier = nxt
    return out


def _signal(pids: list[int], sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


def serve_command(python: str, policy: str, model: str, port: int, vllm_args: list[str]) -> list[str]:
    """The launcher the benchmark runs per policy (the same flags for every policy)."""
    return [python, "-m", "mars_openhands.cli", "serve", "--policy", policy, "--model", model,
            "--port", str(port), *vllm_args]


class EngineServer:
    """`python -m mars_openhands.cli serve --policy P --model DIR --port N [vLLM args]`, logged to a file."""

    def __init__(self, policy: str, model: str | Path, log_path: Path, vllm_args: list[str] | None = None,
                 *, port: int | None = None, python: str = sys.executable, cwd: Path | None = None) -> None:
        self.policy = policy
        self.cwd = cwd
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.command = serve_command(python, policy, str(model), self.port, list(vllm_args or []))
        self.proc: subprocess.Popen | None = None
        self._known: dict[int, str] = {}      # descendant pid -> its start time (guards pid reuse)

    def start(self, timeout_s: float = 600.0) -> None:
        env = {**os.environ, "VLLM_HOST_IP": "127.0.0.1", "PYTHONUNBUFFERED": "1"}
        env.pop("VIRTUAL_ENV", None)     # the child runs an explicit interpreter; a caller's venv would mislead it
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, cwd=self.cwd,
                                         stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._remember()
            if self.proc.poll() is not None:
                raise ServerError(f"engine for policy {self.policy!r} exited with status {self.proc.returncode}"
                                  f" before /health answered; last log lines:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    self._remember()
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise ServerError(f"engine for policy {self.policy!r} not healthy after {timeout_s:.0f} s; "
                          f"last log lines:\n{self.log_tail()}")

    def _remember(self) -> None:
        assert self.proc is not None
        for pid in descendants(self.proc.pid):
            start = _start_time(pid)
            if start is not None:
                self._known.setdefault(pid, start)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM the process group, SIGKILL after `grace_s`; then kill any descendant left over."""
        if self.proc is None:
            return
        self._remember()
        pgid = self.proc.pid
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        _signal([p for p, start in self._known.items() if _start_time(p) == start], signal.SIGKILL)
        self._known.clear()
        self.proc = None

    def __enter__(self) -> EngineServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _start_time(pid: int) -> str | None:
    """Start time of a live (non-zombie) process, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]
