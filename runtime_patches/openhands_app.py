"""Runtime patches of the OpenHands app server (`openhands-ai` 1.11.0) that process sandboxes need.

`mars-openhands app` applies them before uvicorn imports the app. Each fixes an upstream bug that
stops process sandboxes (agent-servers started as child processes of the app) from working on a
host like this one (a container, 2 cores, several conversations started at once):

- `localhost`: the app rewrites every `localhost` URL it calls to `host.docker.internal` whenever
  it runs inside a container (`utils.docker_utils.replace_localhost_hostname_for_docker`), also
  for process sandboxes, which share the app's network: no sandbox is ever reached
  (upstream OpenHands#14499). Patch: with process sandboxes the rewrite is off.
- `running`: a process sandbox counts as RUNNING only while psutil reports it on a CPU; an idle
  agent-server is "sleeping", reported STARTING, and the start task waits at WAITING_FOR_SANDBOX
  (upstream PR OpenHands#14267). Patch: any live process that is not stopped or a zombie is
  RUNNING; the health check that follows still decides whether it answers.
- `ports`: `_find_unused_port` only tries a bind; an agent-server takes seconds to bind its port,
  so conversations started together get the same port and all but one fail (upstream PR
  OpenHands#14186, closed unmerged). Patch: ports of known sandboxes and ports handed out in the
  last `PORT_CLAIM_S` seconds are skipped.
- `browser`: the app always gives the agent the browser tool (`get_default_tools(enable_browser=True)`),
  and an agent-server without a Chromium fails every conversation start with HTTP 500 (no upstream
  issue found). Patch: with process sandboxes, the browser tool only where the SDK's own check
  (`BrowserToolExecutor.check_chromium_available`) finds a Chromium on this host.
- `ready`: `_wait_for_server_ready` gives an agent-server 30 s; three starting together on 2 cores
  take longer. Patch: `MARS_SANDBOX_READY_TIMEOUT_S` (default `READY_TIMEOUT_S`).

Guard: `check()` names each patched function whose shape differs from 1.11.0; `apply()` refuses
(PatchError) then, and only warns on other versions whose shape matches.
"""
from __future__ import annotations

import functools
import inspect
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from mars_openhands.openhands import importhook

log = logging.getLogger("runtime_patches.openhands_app")

TESTED_APP_VERSIONS = ("1.11.0",)
PORT_CLAIM_S = 120.0
READY_TIMEOUT_S = 180
READY_TIMEOUT_ENV = "MARS_SANDBOX_READY_TIMEOUT_S"
_MARK = "__mars_patched__"
_PROCESS_RUNTIMES = ("local", "process")


class PatchError(importhook.PatchError):
    """The installed openhands-ai no longer has the shape this patch wraps."""


def app_version() -> str:
    try:
        return version("openhands-ai")
    except PackageNotFoundError:
        return "(not installed)"


def process_sandboxes(env: dict[str, str] | None = None) -> bool:
    """Whether the app is configured for process sandboxes (`RUNTIME` or `OH_SANDBOX_KIND`)."""
    env = dict(os.environ) if env is None else env
    return env.get("RUNTIME") in _PROCESS_RUNTIMES or env.get("OH_SANDBOX_KIND") == "ProcessSandboxServiceInjector"


def _expected() -> dict[str, tuple[Any, str, tuple[str, ...]]]:
    """Patch point -> (owner, attribute, leading parameter names the patch relies on)."""
    from openhands.app_server.app_conversation import live_status_app_conversation_service as lsc
    from openhands.app_server.sandbox import process_sandbox_service as pss
    from openhands.app_server.utils import docker_utils

    svc = pss.ProcessSandboxService
    return {
        "localhost": (docker_utils, "is_running_in_docker", ()),
        "browser": (lsc, "get_default_tools", ("enable_browser", "enable_sub_agents")),
        "browser_agents": (lsc, "register_builtins_agents", ("enable_browser",)),
        "running": (svc, "_get_process_status", ("self", "process_info")),
        "ports": (svc, "_find_unused_port", ("self",)),
        "ready": (svc, "_wait_for_server_ready", ("self", "port", "timeout")),
    }


def check() -> list[str]:
    """Problems that make the patches unsafe on the installed app (empty list = safe)."""
    try:
        expected = _expected()
        from openhands.app_server.sandbox import process_sandbox_service as pss
    except ImportError as e:
        return [f"import: {e}"]
    problems = []
    for owner, attr, params in expected.values():
        fn = getattr(owner, attr, None)
        where = f"{getattr(owner, '__name__', owner)}.{attr}"
        if not callable(fn):
            problems.append(f"{where}: missing")
            continue
        got = tuple(inspect.signature(getattr(fn, "__wrapped__", fn)).parameters)
        if got[:len(params)] != params or (not params and got):
            problems.append(f"{where}: parameters {got}, patch expects {params}")
    if not isinstance(getattr(pss, "_processes", None), dict):
        problems.append(f"{pss.__name__}._processes: not the module's dict of sandboxes")
    return problems


def _not_in_container() -> bool:
    return False


def chromium() -> str | None:
    """The Chromium the SDK's browser tool would use on this host, or None."""
    from openhands.tools.browser_use.impl import BrowserToolExecutor

    found: str | None = BrowserToolExecutor.check_chromium_available()
    return found


def _browser_if_chromium(orig: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, enable_browser: bool = True, **kwargs: Any) -> Any:
        return orig(*args, enable_browser=enable_browser and chromium() is not None, **kwargs)
    return wrapper


def _process_status(orig: Callable[..., Any]) -> Callable[..., Any]:
    import psutil
    from openhands.app_server.sandbox.sandbox_models import SandboxStatus

    def wrapper(self: Any, process_info: Any) -> Any:
        status = orig(self, process_info)
        if status != SandboxStatus.STARTING:
            return status
        try:
            state = psutil.Process(process_info.pid).status()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return SandboxStatus.MISSING
        return SandboxStatus.MISSING if state in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD) else SandboxStatus.RUNNING
    return wrapper


class _PortClaims:
    """Ports handed to sandboxes that may not have bound them yet (the app runs one event loop,
    but the lock keeps this correct under threads too)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.at: dict[int, float] = {}

    def claim(self, pick: Callable[[set[int]], int], taken: set[int]) -> int:
        with self.lock:
            now = time.monotonic()
            self.at = {p: t for p, t in self.at.items() if now - t < PORT_CLAIM_S}
            port = pick(taken | set(self.at))
            self.at[port] = now
            return port


_claims = _PortClaims()


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("", port))  # the stock probe
        except OSError:
            return False
    return True


def _unused_port(orig: Callable[..., Any]) -> Callable[..., Any]:
    from openhands.app_server.errors import SandboxError
    from openhands.app_server.sandbox import process_sandbox_service as pss

    def wrapper(self: Any) -> int:
        def pick(skip: set[int]) -> int:
            for port in range(self.base_port, self.base_port + 10_000):  # the stock range
                if port not in skip and _bindable(port):
                    return port
            raise SandboxError("No available ports found")
        return _claims.claim(pick, {p.port for p in list(pss._processes.values())})
    return wrapper


def ready_limit_s() -> int:
    """Seconds an agent-server gets to answer; PatchError naming the variable if it is malformed."""
    raw = os.environ.get(READY_TIMEOUT_ENV)
    try:
        limit = int(raw) if raw else READY_TIMEOUT_S
    except ValueError:
        limit = 0
    if limit <= 0:
        raise PatchError(f"{READY_TIMEOUT_ENV}: expected whole seconds > 0, got {raw!r}")
    return limit


def _ready_timeout(orig: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(self: Any, port: int, timeout: int = 30) -> Any:
        return orig(self, port, max(timeout, ready_limit_s()))
    return wrapper


def _wrap(owner: Any, attr: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    orig = getattr(owner, attr)
    if getattr(orig, _MARK, False):
        return
    wrapper = functools.wraps(orig)(make(orig))
    setattr(wrapper, _MARK, True)
    setattr(owner, attr, wrapper)


def apply() -> list[str]:
    """Install the patches (idempotent); returns the names applied. PatchError if the shape changed.

    Without process sandboxes only `running`, `ports` and `ready` are applied (they touch the
    process sandbox service alone); `localhost` and `browser` are left as shipped."""
    ready_limit_s()  # a malformed limit fails here, not at the first sandbox start
    problems = check()
    if problems:
        raise PatchError(f"mars-openhands cannot patch openhands-ai {app_version()}: " + "; ".join(problems))
    if app_version() not in TESTED_APP_VERSIONS:
        log.warning("mars-openhands: openhands-ai %s is untested (tested: %s); shapes match",
                    app_version(), ", ".join(TESTED_APP_VERSIONS))
    expected = _expected()
    applied = []
    if process_sandboxes():
        owner, attr, _ = expected["localhost"]
        fn = _not_in_container
        setattr(fn, _MARK, True)
        setattr(owner, attr, fn)
        for name in ("browser", "browser_agents"):
            owner, attr, _ = expected[name]
            _wrap(owner, attr, _browser_if_chromium)
        applied += ["localhost", "browser"]
    makers = {"running": _process_status, "ports": _unused_port, "ready": _ready_timeout}
    for name, make in makers.items():
        owner, attr, _ = expected[name]
        _wrap(owner, attr, make)
        applied.append(name)
    return applied


def applied() -> dict[str, bool]:
    """Which patch points are patched now."""
    return {name: bool(getattr(getattr(owner, attr), _MARK, False))
            for name, (owner, attr, _) in _expected().items()}
