"""Start and stop `mars-openhands serve` (the vLLM engine under a MARS or baseline policy).

The engine lives in the engine environment (.venv, Python 3.11), the driver in the agent
environment, so the engine is a child process: started in its own session (process group), its
output in a log file, ready when `/health` answers, and stopped by signalling the whole group so
no EngineCore or worker process outlives it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mars_openhands.procs import StartError
from mars_openhands.replay.server import EngineServer

REPO = Path(__file__).resolve().parents[3]
ENGINE_PYTHON = REPO / ".venv" / "bin" / "python"


class EngineStartError(RuntimeError):
    """The engine did not come up; the message points at its log."""


@dataclass
class EngineProcess:
    """One engine child: `start()` blocks until healthy, `stop()` ends its process group.

    The process handling (own session, /health polling, group and leftover kill) is the replay
    benchmark's `EngineServer` (`mars_openhands.procs`); this adds the driver's checks and flags.
    """

    policy: str
    model: Path
    log_path: Path
    port: int = 0
    extra_args: list[str] = field(default_factory=list)
    python: Path = ENGINE_PYTHON
    startup_timeout_s: float = 300.0
    server: EngineServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def vllm_args(self) -> list[str]:
        # per-request prefix-cache hits in `usage`: the proxy records them turn by turn
        details = [] if "--enable-prompt-tokens-details" in self.extra_args else ["--enable-prompt-tokens-details"]
        return ["--host", "127.0.0.1", *details, *self.extra_args]

    def start(self) -> EngineProcess:
        if not self.python.exists():
            raise EngineStartError(f"engine environment missing: {self.python} (run `make setup-engine`)")
        if not (self.model / "config.json").is_file():
            raise EngineStartError(f"model directory {self.model} has no config.json (run `make model`)")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.server = EngineServer(self.policy, self.model, self.log_path, self.vllm_args(),
                                   port=self.port or None, python=str(self.python), cwd=REPO)
        self.port = self.server.port
        try:
            self.server.start(self.startup_timeout_s)
        except StartError as e:           # start() already stopped the group (the message names the log)
            self.server = None
            raise EngineStartError(str(e)) from None
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM the process group, SIGKILL what is left after `grace_s`."""
        if self.server is not None:
            self.server.stop(grace_s)
            self.server = None

    def __enter__(self) -> EngineProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
