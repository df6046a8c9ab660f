"""Test suites run in the environment they belong to (see the Makefile's test targets).

The agent suites import OpenHands and swebench, which live only in `.venv-agent` (Python 3.12);
in the engine environment they are not collected at all rather than failing at import.
"""
import importlib.util

AGENT_SUITES = ["openhands", "evaluation"]

collect_ignore = [] if importlib.util.find_spec("openhands") else AGENT_SUITES
