"""Test suites run in the environment they belong to (see the Makefile's test targets).

The agent suites import OpenHands and swebench, which live only in `.venv-agent` (Python 3.12);
in the engine environment they are not collected at all rather than failing at import.
"""
import importlib.util

import pytest

from mars_openhands.hints import MAKE_ENV

AGENT_SUITES = ["openhands", "evaluation"]

collect_ignore = [] if importlib.util.find_spec("openhands") else AGENT_SUITES


@pytest.fixture(autouse=True)
def _hints_in_flags(monkeypatch):
    """Hints name the commands' flags in tests, also when the tests run under make (`hints.py`)."""
    monkeypatch.delenv(MAKE_ENV, raising=False)
