"""Child processes in their own process group: start, wait for health, stop, and what they left.

Every child (an engine, a replica, the router, a build or an eval script) starts in a new session,
so its process group holds it and everything it forks, and the terminal's Ctrl-C reaches only its
parent, which stops it on purpose. Stopping is by group: SIGTERM, a grace period for the whole
group to exit, then SIGKILL. A descendant that left the group (its own `setsid`) is a leftover;
`Leftovers` remembers the descendants it saw (by pid and start time, so a reused pid is spared)
and kills those still alive once the group is gone.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import httpx


class StartError(RuntimeError):
    """A child server did not come up (the message names it and carries the tail of its log)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_in_group(argv: Sequence[str], *, stdout: IO[Any] | int | None, env: Mapping[str, str] | None = None,
                   cwd: os.PathLike[str] | str | None = None) -> subprocess.Popen[bytes]:
    """Start `argv` in a new session (its own process group), stderr into `stdout`, no stdin."""
    return subprocess.Popen(list(argv), stdout=stdout, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            cwd=cwd, env=None if env is None else dict(env), start_new_session=True)


def stop_group(proc: subprocess.Popen[Any], grace_s: float) -> None:
    """SIGTERM the process group of `proc` (a session leader), wait up to `grace_s` for the whole
    group to exit, then SIGKILL whatever is left of it and reap `proc`."""
    pgid = proc.pid
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    kill_group(proc)


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the process group of `proc` and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


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


def start_time(pid: int) -> str | None:
    """Start time of a live (non-zombie) process, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]


class Leftovers:
    """The descendants of one child seen while it ran, to kill any that outlive its group."""

    def __init__(self) -> None:
        self._known: dict[int, str] = {}      # descendant pid -> its start time (guards pid reuse)

    def remember(self, pid: int) -> None:
        """Note the live descendants of `pid` now."""
        for p in descendants(pid):
            start = start_time(p)
            if start is not None:
                self._known.setdefault(p, start)

    def kill(self) -> None:
        """SIGKILL every remembered descendant that is still the same process, then forget them."""
        for p, start in self._known.items():
            if start_time(p) == start:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self._known.clear()


def log_tail(path: Path, lines: int = 20) -> str:
    """The last `lines` lines of a child's log."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class ChildServer:
    """A server child (an engine, a replica, the router): output appended to `log_path`, healthy once
    `GET {url}/health` answers 200, stopped by process group. With `track_leftovers`, descendants
    that left its group are killed after it too."""

    def __init__(self, name: str, command: list[str], url: str, log_path: Path, *,
                 env: Mapping[str, str] | None = None, cwd: Path | None = None, poll_s: float = 0.25,
                 track_leftovers: bool = False) -> None:
        self.name, self.command, self.url, self.log_path = name, command, url, log_path
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.cwd, self.poll_s = cwd, poll_s
        self.leftovers = Leftovers() if track_leftovers else None
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float) -> None:
        """Start it and wait for `/health`; on failure it is stopped and `StartError` says why."""
        with open(self.log_path, "ab") as log:
            self.proc = start_in_group(self.command, stdout=log, env=self.env, cwd=self.cwd)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._remember()
            code = self.proc.poll()
            if code is not None:
                raise StartError(f"{self.name} exited with status {code} before /health answered; "
                                 f"last log lines ({self.log_path}):\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    self._remember()
                    return
            except httpx.HTTPError:
                pass
            time.sleep(self.poll_s)
        self.stop()
        raise StartError(f"{self.name} not healthy after {timeout_s:.0f} s; last log lines "
                         f"({self.log_path}):\n{self.log_tail()}")

    def _remember(self) -> None:
        if self.leftovers is not None and self.proc is not None:
            self.leftovers.remember(self.proc.pid)

    @property
    def returncode(self) -> int | None:
        """None while it runs (or before it started)."""
        return None if self.proc is None else self.proc.poll()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        return log_tail(self.log_path, lines)

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM its process group, SIGKILL whatever is left of the group after `grace_s`, then
        any leftover descendant."""
        if self.proc is None:
            return
        self._remember()
        stop_group(self.proc, grace_s)
        if self.leftovers is not None:
            self.leftovers.kill()
