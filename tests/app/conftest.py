"""The OpenHands app (`openhands-ai`) lives in its own environment, `.venv-app` (`make setup-app`),
which `make setup` does not build. Tests that need it run its Python as a child process from
whichever environment runs pytest, and skip, saying so, where it is not built."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
APP_VENV = REPO / ".venv-app"
APP_PY = APP_VENV / "bin" / "python"


def app_env_built() -> bool:
    return (APP_VENV / ".done").is_file() and APP_PY.exists()


needs_app_env = pytest.mark.skipif(not app_env_built(),
                                   reason="needs the OpenHands app environment .venv-app (`make setup-app`)")
