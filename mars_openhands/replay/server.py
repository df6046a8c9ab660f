"""One `mars-openhands serve` engine per policy: a `procs.ChildServer` that also kills any descendant
that escaped its process group, so no server outlives a run."""
from __future__ import annotations

import sys
from pathlib import Path

from mars_openhands.procs import ChildServer, free_port
from mars_openhands.vllm.serve import serve_command


class EngineServer(ChildServer):
    """`python -m mars_openhands.cli serve --policy P --model DIR --port N [vLLM args]`, logged to a file."""

    def __init__(self, policy: str, model: str | Path, log_path: Path, vllm_args: list[str] | None = None,
                 *, port: int | None = None, python: str = sys.executable, cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.policy = policy
        self.port = port or free_port()
        url = f"http://127.0.0.1:{self.port}"
        super().__init__(f"engine for policy {policy!r}",
                         serve_command(python, policy, model, self.port, list(vllm_args or [])), url, log_path,
                         env={"VLLM_HOST_IP": "127.0.0.1", **(env or {})}, cwd=cwd, poll_s=0.5, track_leftovers=True)
        self.env.pop("VIRTUAL_ENV", None)   # the child runs an explicit interpreter; a caller's venv would mislead it

    def start(self, timeout_s: float = 600.0) -> None:
        super().start(timeout_s)

    def stop(self, grace_s: float = 20.0) -> None:
        super().stop(grace_s)

    def __enter__(self) -> EngineServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
