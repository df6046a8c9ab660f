"""Runtime patch of the stock `openhands` CLI (1.16.0): `openhands --config mars.toml`.

The CLI has no config file and no `--config` flag. Applied by the import hook
(`mars_openhands.openhands.importhook`, installed by `autopatch`) right after
`openhands_cli.entrypoint` is imported (before the console script calls `main`), this patch:

1. wraps the entry module's `create_main_parser` so the parser knows `--config PATH` (shown in
   `--help`, parsed like any other flag);
2. wraps `main`: when `--config` is given it loads `mars.toml` (a bad file exits 2 with an error
   naming the key), translates it into the CLI's own inputs - `LLM_MODEL/LLM_BASE_URL/LLM_API_KEY`
   with `--override-with-envs`, `OPENHANDS_WORK_DIR` and `OPENHANDS_CONVERSATIONS_DIR` - sets
   `MARS_CONFIG` for the SDK patch (and any agent-server child), then runs the stock `main`.

Without `--config` the CLI behaves exactly as shipped. `MARS_OPENHANDS_PATCH=0` turns it off.
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable, MutableMapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from mars_openhands.openhands import importhook
from mars_openhands.openhands.config import ConfigError, MarsConfig, load_config

TESTED_CLI_VERSIONS = ("1.16.0",)
_MARK = "__mars_patched__"
_REQUIRED_FLAGS = ("--task", "--headless", "--override-with-envs")


class PatchError(importhook.PatchError):
    """The installed `openhands` CLI no longer has the shape this patch wraps."""


def _cli_version() -> str:
    try:
        return version("openhands")
    except PackageNotFoundError:
        return "(version unknown)"


def check(module: Any) -> list[str]:
    """Problems that make the patch unsafe on this CLI (empty list = safe)."""
    problems = [f"openhands_cli.entrypoint.{name}: missing"
                for name in ("main", "create_main_parser") if not callable(getattr(module, name, None))]
    if problems:
        return problems
    parser = getattr(module.create_main_parser, "__wrapped__", module.create_main_parser)()
    known = {s for a in parser._actions for s in a.option_strings}
    problems += [f"CLI flag {flag}: missing" for flag in _REQUIRED_FLAGS if flag not in known]
    if "--config" in known:
        problems.append("CLI flag --config: the CLI has its own now; this patch would shadow it")
    return problems


def config_path(argv: list[str]) -> str | None:
    """The value of `--config PATH` / `--config=PATH` in argv, or None."""
    for i, arg in enumerate(argv):
        if arg == "--config":
            return argv[i + 1] if i + 1 < len(argv) else ""
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
    return None


def apply_config_env(cfg: MarsConfig, env: MutableMapping[str, str] = os.environ) -> None:
    """Translate mars.toml into the environment the stock CLI (and the SDK patch) read."""
    env["LLM_MODEL"] = cfg.llm.model
    env["LLM_BASE_URL"] = cfg.llm.base_url
    env["LLM_API_KEY"] = cfg.llm.api_key
    env["OPENHANDS_WORK_DIR"] = str(cfg.workspace.working_dir)
    if cfg.workspace.persistence_dir is not None:
        env["OPENHANDS_CONVERSATIONS_DIR"] = str(cfg.workspace.persistence_dir)
    env["MARS_CONFIG"] = str(cfg.path)


def _parser(orig: Callable[[], argparse.ArgumentParser]) -> Callable[[], argparse.ArgumentParser]:
    def create_main_parser() -> argparse.ArgumentParser:
        parser = orig()
        parser.add_argument("--config", metavar="MARS_TOML",
                            help="mars-openhands: read the LLM and MARS settings from this mars.toml "
                                 "(implies --override-with-envs; MARS_OPENHANDS_PATCH=0 disables)")
        return parser
    return create_main_parser


def _main(orig: Callable[[], Any]) -> Callable[[], Any]:
    def main() -> Any:
        path = config_path(sys.argv[1:])
        if path is None:
            return orig()
        if not path:
            print("openhands: error: --config: expected a path to mars.toml", file=sys.stderr)
            sys.exit(2)
        try:
            cfg = load_config(path)
        except ConfigError as e:
            print(f"openhands: error: --config: {e}", file=sys.stderr)
            sys.exit(2)
        apply_config_env(cfg)
        if "--override-with-envs" not in sys.argv:
            sys.argv.append("--override-with-envs")
        from mars_openhands.openhands import instrument
        inst = instrument.enable(cfg.mars)
        try:
            return orig()
        finally:
            instrument.disable()  # flush within the exit budget, then report delivery
            if inst.emitter is not None:
                print(f"mars events: {inst.emitter.stats.summary()} to {cfg.mars.events_url}",
                      file=sys.stderr)
    return main


def apply(module: Any) -> None:
    """Patch `openhands_cli.entrypoint` in place (idempotent); PatchError if its shape changed."""
    if getattr(module.main, _MARK, False):
        return
    problems = check(module)
    if problems:
        raise PatchError(f"mars-openhands cannot patch openhands {_cli_version()}: " + "; ".join(problems))
    for name, make in (("create_main_parser", _parser), ("main", _main)):
        wrapped = functools.wraps(getattr(module, name))(make(getattr(module, name)))
        setattr(wrapped, _MARK, True)
        setattr(module, name, wrapped)
