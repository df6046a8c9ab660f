"""Commands that run in their own process group, tracked so that a stopping run can kill them all.

Builds, installs and eval scripts each start a tree of processes (pip, compilers, pytest workers).
Each runs in its own session, so a timeout kills the whole tree, and it is shielded from the
terminal's SIGINT; a driver stopping on Ctrl-C therefore kills what is in flight through the
`ProcessGroups` that started it.
"""
from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Mapping, Sequence
from typing import IO

from mars_openhands.procs import kill_group, start_in_group


class ProcessGroups:
    """The commands in flight of one kind (e.g. environment builds, eval scripts)."""

    def __init__(self) -> None:
        self._running: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()

    def run(self, argv: Sequence[str], *, cwd: os.PathLike[str] | str, env: Mapping[str, str],
            stdout: IO[str], timeout: float) -> int:
        """Run `argv` (stderr into `stdout`, no stdin) until it exits or `timeout` passes, when its
        group is killed; the group is also killed if waiting is interrupted. Returns its exit status
        (-SIGKILL after a timeout or `kill_all`)."""
        proc = start_in_group(argv, stdout=stdout, env=env, cwd=cwd)
        with self._lock:
            self._running.add(proc)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if proc.poll() is None:
                kill_group(proc)
            with self._lock:
                self._running.discard(proc)
        return proc.returncode

    def kill_all(self) -> int:
        """Kill every command still running; returns how many."""
        with self._lock:
            running = list(self._running)
            self._running.clear()
        for proc in running:
            kill_group(proc)
        return len(running)
