"""Activate a task's environment in the terminal of the agent working on it, per worker thread.

The OpenHands terminal tool starts its shells (tmux sessions, or a PTY subprocess) with the
process environment, read through `sanitized_env()` when the conversation initialises its tools,
which happens in the thread that drives the conversation. Concurrent agents on different tasks
need different environments in one process, so the terminal modules' `sanitized_env` is wrapped
to add the variables set for the calling thread (`activated`): the agent's `python`, `pip` and
`pytest` are its task's, and later panes inherit them from their tmux session.
"""

from __future__ import annotations

import functools
import importlib
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

TERMINAL_MODULES = ("openhands.tools.terminal.terminal.tmux_pane_pool",
                    "openhands.tools.terminal.terminal.tmux_terminal",
                    "openhands.tools.terminal.terminal.subprocess_terminal")
_local = threading.local()
_MARK = "__mars_thread_env__"


def overlay() -> dict[str, str]:
    """The variables set for this thread (empty outside `activated`)."""
    return dict(getattr(_local, "variables", None) or {})


def _wrap(original: Callable[..., dict[str, str]]) -> Callable[..., dict[str, str]]:
    @functools.wraps(original)
    def sanitized_env(*args: Any, **kwargs: Any) -> dict[str, str]:
        env = original(*args, **kwargs)
        env.update(overlay())
        return env

    setattr(sanitized_env, _MARK, True)
    return sanitized_env


def install() -> None:
    """Wrap `sanitized_env` in the terminal modules (idempotent); AttributeError if the SDK moved it."""
    for name in TERMINAL_MODULES:
        module = importlib.import_module(name)
        current = getattr(module, "sanitized_env")  # noqa: B009 - a module found by name
        if not getattr(current, _MARK, False):
            setattr(module, "sanitized_env", _wrap(current))  # noqa: B010


@contextmanager
def activated(variables: Mapping[str, str]) -> Iterator[None]:
    """Terminals created by this thread inside the block get `variables` on top of the process's."""
    previous = getattr(_local, "variables", None)
    _local.variables = dict(variables)
    try:
        yield
    finally:
        _local.variables = previous
