"""Activate a task's environment in the terminal of the agent working on it, by working directory.

Concurrent agents on different tasks need different environments in one process, and each agent's
terminal starts in its own workspace: the variables registered for a directory (`for_directory`)
go to the terminals that start there. `install` hooks them in the way the installed SDK allows:

- SDKs whose `TerminalTool.create` takes `env` (1.58 has it; 1.21 does not): its public setting for
  the terminal's extra variables. "terminal" is registered (`register_tool`) to a TerminalTool
  whose `create` passes the variables for the workspace's working directory as `env`.
- Older SDKs (1.21): the terminals start their shells with the process environment read through
  their module's `sanitized_env()` in `initialize`, in a thread of the SDK's own (tools start
  concurrently); each terminal class's `initialize` is wrapped to add its directory's variables
  to what `sanitized_env()` returns there.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

#: (module, terminal class) pairs whose `initialize` reads the environment through `sanitized_env`
#: on SDKs without the terminal's `env` setting.
TERMINALS = (("openhands.tools.terminal.terminal.tmux_pane_pool", "TmuxPanePool"),
             ("openhands.tools.terminal.terminal.tmux_terminal", "TmuxTerminal"),
             ("openhands.tools.terminal.terminal.subprocess_terminal", "SubprocessTerminal"))
_MARK = "__mars_terminal_env__"
_lock = threading.Lock()
_by_dir: dict[str, dict[str, str]] = {}
_local = threading.local()
_registered: type | None = None  # the TerminalTool registered as "terminal" (SDKs with `env`)


def _key(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.fspath(path))


def variables_for(work_dir: str | os.PathLike[str]) -> dict[str, str]:
    """The variables registered for a terminal starting in `work_dir` (empty: none)."""
    with _lock:
        return dict(_by_dir.get(_key(work_dir), {}))


def install() -> None:
    """Hook the terminals' environment in the way the installed SDK allows (idempotent).

    AttributeError or ImportError when the SDK has neither way: the caller learns it at once.
    """
    from openhands.tools.terminal import TerminalTool

    if "env" in inspect.signature(TerminalTool.create).parameters:
        _register_terminal(TerminalTool)
    else:
        _wrap_terminals()


# ---- SDKs with the terminal's `env` setting ------------------------------------------------------

def _register_terminal(base: Any) -> None:
    global _registered
    from openhands.sdk.tool import register_tool

    with _lock:
        if _registered is not None:
            return

        class DirectoryEnvTerminalTool(base):
            """Resolves "terminal" to a TerminalTool with its working directory's variables."""

            @classmethod
            def create(cls, conv_state: Any, *, env: Mapping[str, str] | None = None,
                       **params: Any) -> Any:
                variables = {**variables_for(conv_state.workspace.working_dir), **(env or {})}
                return base.create(conv_state, env=variables or None, **params)

        register_tool(base.name, DirectoryEnvTerminalTool)
        _registered = DirectoryEnvTerminalTool


# ---- older SDKs: the terminals' `sanitized_env` ----------------------------------------------------

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


def _wrap_terminals() -> None:
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
