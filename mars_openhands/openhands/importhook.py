"""Load the OpenHands runtime patches into every Python process of the agent environment.

Mechanism: `make setup-agent` runs `python -m mars_openhands.openhands.autopatch install`, which
writes `mars_openhands_patch.pth` into the environment's site-packages. Python executes that one
line at start-up; it calls `install_import_hook()` here, which registers a tiny import hook
(stdlib only, nothing imported eagerly) that acts only when OpenHands itself gets imported:

- `openhands_cli.entrypoint` -> the CLI patch: the stock `openhands` CLI gains `--config mars.toml`;
- `openhands.sdk` -> the SDK patch, and instrumentation starts when the process was configured
  through the environment: `MARS_CONFIG=/path/mars.toml` (what `openhands --config` and
  `mars-openhands run` set, inherited by an agent-server they start) or `MARS_EVENTS_URL`
  (+ optional `MARS_EVENTS_TOKEN`) for a bare agent-server.

The patches are found by module name (`PATCHES`) when the hook fires: they depend on this package
(`runtime_patches` -> `mars_openhands.openhands`), never the reverse.

It also defaults `LITELLM_LOCAL_MODEL_COST_MAP=True` (set it to False to let litellm fetch its
price list; offline that fetch retries for about 8 s at every start).

Turn it off for one process with `MARS_OPENHANDS_PATCH=0`; remove it with
`python -m mars_openhands.openhands.autopatch uninstall`.
"""
from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Protocol, cast

from mars_openhands.protocol import TOKEN_ENV

if TYPE_CHECKING:  # not imported at start-up
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec

DISABLE_ENV = "MARS_OPENHANDS_PATCH"
SDK, CLI = "openhands.sdk", "openhands_cli.entrypoint"

#: OpenHands module -> the patch module applied right after it is imported.
PATCHES: dict[str, str] = {
    CLI: "runtime_patches.openhands_cli",
    SDK: "runtime_patches.openhands_sdk",
}
#: The OpenHands app's patches: `mars-openhands app` applies them itself, before the app is imported.
APP_PATCH = "runtime_patches.openhands_app"


class PatchError(RuntimeError):
    """The installed OpenHands no longer has the shape a runtime patch wraps."""


class RuntimePatch(Protocol):
    """What a module named in `PATCHES` provides."""

    def apply(self, module: ModuleType) -> None:
        """Patch the just-imported OpenHands `module` in place (idempotent); PatchError if unsafe."""


def enabled() -> bool:
    return os.environ.get(DISABLE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def load_patch(target: str) -> RuntimePatch:
    """The patch module registered for the OpenHands module `target`, imported now."""
    return cast(RuntimePatch, importlib.import_module(PATCHES[target]))


def apply_patch(target: str) -> None:
    """Import `target` and apply its patch now, for launchers that must not rely on the .pth hook.

    Raises PatchError when the installed OpenHands does not match the patch."""
    load_patch(target).apply(importlib.import_module(target))


def _patch_cli(module: ModuleType) -> None:
    load_patch(CLI).apply(module)


def _configured() -> bool:
    return bool(os.environ.get("MARS_CONFIG") or os.environ.get("MARS_EVENTS_URL"))


def _patch_sdk(module: ModuleType) -> None:
    try:
        load_patch(SDK).apply(module)
    except PatchError:
        if _configured():  # MARS was asked for: a silent no-op would lie
            raise
        import logging
        logging.getLogger(PATCHES[SDK]).warning("mars-openhands: SDK patch skipped", exc_info=True)
        return
    enable_from_env()


_HOOKS: dict[str, Callable[[ModuleType], None]] = {CLI: _patch_cli, SDK: _patch_sdk}


def enable_from_env() -> None:
    """Start instrumentation if this process was configured through the environment."""
    from mars_openhands.openhands import instrument
    from mars_openhands.openhands.config import EmitterConfig, load_config

    if os.environ.get("MARS_CONFIG"):
        instrument.enable(load_config(os.environ["MARS_CONFIG"]).mars)
    elif os.environ.get("MARS_EVENTS_URL"):
        instrument.enable(EmitterConfig(events_url=os.environ["MARS_EVENTS_URL"],
                                        token=os.environ.get(TOKEN_ENV) or None))


class _Loader:
    """Runs the real loader, then the patch for that module (duck-typed: importlib.abc costs
    tens of ms at every interpreter start)."""

    def __init__(self, inner: Loader, hook: Callable[[ModuleType], None]):
        self.inner, self.hook = inner, hook

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        self.hook(module)

    def __getattr__(self, name: str) -> object:  # resource readers, get_code, ...: the real loader's
        return getattr(self.inner, name)


class _Finder:
    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        hook = _HOOKS.get(fullname)
        if hook is None:
            return None
        if fullname == SDK:  # before litellm is imported by it: a self-hosted model needs
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price list from the web
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None and spec.loader is not None:
                spec.loader = cast("Loader", _Loader(spec.loader, hook))
                return spec
        return None


def install_import_hook() -> None:
    """Called from the .pth at start-up: cheap, stdlib only, a no-op when disabled."""
    if not enabled() or any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Finder())
    for name, hook in _HOOKS.items():  # already imported (e.g. the hook was installed late)
        if name in sys.modules:
            hook(sys.modules[name])
