"""Start and stop `mars-openhands serve` (the vLLM engine under a MARS or baseline policy).

The engine lives in the engine environment (.venv, Python 3.11), the driver in the agent
environment, so the engine is a child process: started in its own session (process group), its
output in a log file, ready when `/health` answers, and stopped by signalling the whole group so
no EngineCore or worker process outlives it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
ENGINE_PYTHON = REPO / ".venv" / "bin" / "python"


class EngineStartError(RuntimeError):
    """The engine did not come up; the message points at its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class EngineProcess:
    """One engine child: `start()` blocks until healthy, `stop()` ends its process group."""

    policy: str
    model: Path
    log_path: Path
    port: int = 0
    extra_args: list[str] = field(default_factory=list)
    python: Path = ENGINE_PYTHON
    startup_timeout_s: float = 300.0
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        # per-request prefix-cache hits in `usage`: the proxy records them turn by turn
        details = [] if "--enable-prompt-tokens-details" in self.extra_args else ["--enable-prompt-tokens-details"]
        return [str(self.python), "-m", "mars_openhands.cli", "serve", "--policy", self.policy,
                "--model", str(self.model), "--host", "127.0.0.1", "--port", str(self.port),
                *details, *self.extra_args]

    def start(self) -> "EngineProcess":
        if not self.python.exists():
            raise EngineStartError(f"engine environment missing: {self.python} (run `make setup-engine`)")
        if not (self.model / "config.json").is_file():
            raise EngineStartError(f"model directory {self.model} has no config.json (run `make model`)")
        self.port = self.port or free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, VLLM_HOST_IP="127.0.0.1", PYTHONUNBUFFERED="1")
        env.pop("VIRTUAL_ENV", None)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=REPO, env=env, start_new_session=True)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            while time.monotonic() < deadline:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise EngineStartError(f"engine exited with status {self.proc.returncode} during start-up; "
                                           f"see {self.log_path}:\n{self.log_tail()}")
                try:
                    if client.get(f"{self.url}/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(1.0)
        raise EngineStartError(f"engine not healthy after {self.startup_timeout_s:.0f} s; see {self.log_path}")

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM the process group, SIGKILL what is left after `grace_s`."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        try:  # the group may outlive its leader (EngineCore children)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.proc = None

    def __enter__(self) -> "EngineProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
