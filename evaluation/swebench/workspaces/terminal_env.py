"""Activate a task's environment in the terminal of the agent working on it, by working directory.

The OpenHands terminal tool starts its shells (a tmux session whose panes inherit its environment,
or a PTY subprocess) with the process environment, read through `sanitized_env()` when the
terminal initialises, in a thread of the SDK's own (tools start concurrently). Concurrent agents
on different tasks need different environments in one process, and each agent's terminal starts
in its own workspace: so each terminal class's `initialize` is wrapped to add the variables
registered for its working directory (`for_directory`) to what `sanitized_env()` returns there.
"""

from __future__ import annotations

import functools
import importlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

#: (module, terminal class) pairs whose `initialize` reads the environment through `sanitized_env`.
TERMINALS = (("openhands.tools.terminal.terminal.tmux_pane_pool", "TmuxPanePool"),
             ("openhands.tools.terminal.terminal.tmux_terminal", "TmuxTerminal"),
             ("openhands.tools.terminal.terminal.subprocess_terminal", "SubprocessTerminal"))
_MARK = "__mars_terminal_env__"
_lock = threading.Lock()
_by_dir: dict[str, dict[str, str]] = {}
_local = threading.local()


def _key(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.fspath(path))


def variables_for(work_dir: str | os.PathLike[str]) -> dict[str, str]:
    """The variables registered for a terminal starting in `work_dir` (empty: none)."""
    with _lock:
        return dict(_by_dir.get(_key(work_dir), {}))


def _wrap_env(original: Callable[..., dict[str, str]]) -> Callable[..., dict[str, str]]:
    @functools.wraps(original)
    def sanitized_env(*args: Any, **kwargs: Any) -> dict[str, str]:
        env = original(*args, **kwargs)
        env.update(getattr(_local, "variables", None) or {})
        return env

    setattr(sanitized_env, _MARK, True)
    return sanitized_env


def _wrap_init(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def initialize(self: Any, *args: Any, **kwargs: Any) -> Any:
        previous = getattr(_local, "variables", None)
        _local.variables = variables_for(self.work_dir)
        try:
            return original(self, *args, **kwargs)
        finally:
            _local.variables = previous

    setattr(initialize, _MARK, True)
    return initialize


def install() -> None:
    """Wrap the terminals' `initialize` and their module's `sanitized_env` (idempotent).

    AttributeError or ImportError when the SDK moved them: the caller learns it at once.
    """
    for module_name, cls_name in TERMINALS:
        module = importlib.import_module(module_name)
        env_fn = getattr(module, "sanitized_env")  # noqa: B009 - a module found by name
        if not getattr(env_fn, _MARK, False):
            setattr(module, "sanitized_env", _wrap_env(env_fn))  # noqa: B010
        cls = getattr(module, cls_name)
        if not getattr(cls.initialize, _MARK, False):
            cls.initialize = _wrap_init(cls.initialize)


@contextmanager
def for_directory(work_dir: str | os.PathLike[str], variables: Mapping[str, str]) -> Iterator[None]:
    """Terminals that start in `work_dir` inside the block get `variables` on top of the process's."""
    key = _key(work_dir)
    with _lock:
        _by_dir[key] = dict(variables)
    try:
        yield
    finally:
        with _lock:
            _by_dir.pop(key, None)
