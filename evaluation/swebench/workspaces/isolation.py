"""Keep a run's processes findable so that they can all be stopped: tmux servers and engine sampling.

The OpenHands terminal tool runs every command in a tmux server and leaves that server behind when
its process is killed. Pointing `TMUX_TMPDIR` at a directory owned by this run puts every server
the run starts on a socket in it; `kill_servers()` ends them (and the commands running in their
panes) without touching anyone else's tmux.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path


class TmuxScope:
    """A private TMUX_TMPDIR for this process while active; kills its servers on exit."""

    def __init__(self) -> None:
        self.dir: Path | None = None
        self._old: str | None = None

    def __enter__(self) -> TmuxScope:
        self.dir = Path(tempfile.mkdtemp(prefix="mars-tmux-"))
        self._old = os.environ.get("TMUX_TMPDIR")
        os.environ["TMUX_TMPDIR"] = str(self.dir)
        return self

    def sockets(self) -> list[Path]:
        if self.dir is None:
            return []
        return sorted(p for p in self.dir.rglob("*") if p.is_socket())

    def kill_servers(self) -> int:
        """Kill every tmux server of this scope; returns how many answered."""
        killed = 0
        for sock in self.sockets():
            proc = subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True)
            killed += proc.returncode == 0
        return killed

    def __exit__(self, *exc: object) -> None:
        self.kill_servers()
        if self._old is None:
            os.environ.pop("TMUX_TMPDIR", None)
        else:
            os.environ["TMUX_TMPDIR"] = self._old
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
