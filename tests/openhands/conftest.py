"""Agent tests run in `.venv-agent` (OpenHands V1, Python 3.12); elsewhere they are not collected.

OpenHands is kept offline and away from the developer's home: litellm uses its bundled price map,
and HOME / OPENHANDS_PERSISTENCE_DIR point into a per-session temp dir before anything imports
the SDK (it writes under `~/.openhands`).
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

if importlib.util.find_spec("openhands") is None or sys.version_info < (3, 12):
    collect_ignore_glob = ["test_*.py"]

_HOME = Path(tempfile.mkdtemp(prefix="mars-agent-home-"))
OFFLINE_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "HOME": str(_HOME),
    "OPENHANDS_PERSISTENCE_DIR": str(_HOME / ".openhands"),
    "OPENHANDS_SUPPRESS_BANNER": "1",
    "HF_HUB_OFFLINE": "1",
    "TMUX_TMPDIR": str(_HOME),  # the terminal tool's tmux sockets: ours alone, checked for leaks
}
os.environ.update(OFFLINE_ENV)
for _var in ("MARS_CONFIG", "MARS_EVENTS_URL", "MARS_EVENTS_TOKEN", "MARS_OPENHANDS_PATCH"):
    os.environ.pop(_var, None)

AGENT_BIN = Path(sys.executable).parent

#: The upstream CLI pins SDK 1.21.0, so `make test-agent-latest` (newest SDK) runs without it.
needs_cli = pytest.mark.skipif(importlib.util.find_spec("openhands_cli") is None,
                               reason="openhands CLI not installed (latest-SDK environment)")


def tmux_sockets() -> list[Path]:
    """tmux server sockets the tests' agents created (under TMUX_TMPDIR)."""
    return [p for p in _HOME.glob("tmux-*/*") if p.is_socket()]


def live_tmux_servers() -> list[Path]:
    return [s for s in tmux_sockets()
            if subprocess.run(["tmux", "-S", str(s), "ls"], capture_output=True).returncode == 0]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for sock in live_tmux_servers():  # only servers on our own sockets
        subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True)
    shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture
def mars_instrumentation():
    """Patch the SDK and yield an enabler; instrumentation is switched off (flushed) afterwards."""
    from mars_openhands.openhands import instrument
    from runtime_patches import openhands_sdk

    openhands_sdk.apply()
    yield instrument.enable
    instrument.disable()


def run_py(args: list[str], *, env: dict[str, str] | None = None, timeout: float = 180,
           cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a program of the agent environment as a real child process."""
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, **(env or {})})
