"""`mars.toml`: one file that says which LLM an OpenHands agent talks to and where MARS listens.

The stock OpenHands CLI has no config file (it reads `~/.openhands/agent_settings.json` or env
vars); `mars.toml` is what both `openhands --config` and `mars-openhands run` read. Unknown keys are
errors, so a typo never silently falls back to a default; every error names the key.

Every table and key, with its type, default and effect: docs/config.md (`TABLES` below is the list
the loader accepts; a test keeps the page and the list the same).
"""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mars_openhands.client.emitter import EmitterConfig
from mars_openhands.protocol import TOKEN_ENV

DEFAULT_TOOLS = ("terminal", "file_editor", "task_tracker")

#: Every table of `mars.toml` and the keys it may hold (docs/config.md describes each one).
TABLES: dict[str, tuple[str, ...]] = {
    "llm": ("model", "base_url", "api_key", "temperature", "max_output_tokens", "timeout_s"),
    "mars": ("events_url", "token", "expected_duration_s", "batch_max", "flush_interval_s", "buffer_size",
             "exit_flush_timeout_s"),
    "agent": ("max_iterations", "tools"),
    "workspace": ("working_dir", "persistence_dir"),
}


class ConfigError(ValueError):
    """A missing or malformed `mars.toml`; the message names the file and the key."""


@dataclass(frozen=True)
class LLMConfig:
    model: str
    base_url: str
    api_key: str = "EMPTY"
    temperature: float | None = None
    max_output_tokens: int | None = None
    timeout_s: float | None = None


@dataclass(frozen=True)
class AgentConfig:
    max_iterations: int = 50
    tools: tuple[str, ...] = DEFAULT_TOOLS


@dataclass(frozen=True)
class WorkspaceConfig:
    working_dir: Path
    persistence_dir: Path | None = None


@dataclass(frozen=True)
class MarsConfig:
    path: Path
    llm: LLMConfig
    mars: EmitterConfig
    agent: AgentConfig
    workspace: WorkspaceConfig


class _Section:
    """Typed reads from one TOML table; every error names `file: [table] key`.

    Each read has a required form, a form with a default (never None) and an optional one."""

    def __init__(self, path: Path, name: str, data: object):
        self.where = f"{path}: [{name}]"
        allowed = set(TABLES[name])
        if not isinstance(data, dict):
            raise ConfigError(f"{self.where}: expected a table, got {type(data).__name__}")
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise ConfigError(f"{self.where} {unknown[0]}: unknown key (allowed: {', '.join(sorted(allowed))})")
        self.data: dict[str, Any] = data

    def _get(self, key: str, types: tuple[type, ...], kind: str, required: bool, default: Any) -> Any:
        if key not in self.data:
            if required:
                raise ConfigError(f"{self.where} {key}: required key missing")
            return default
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, types):
            raise ConfigError(f"{self.where} {key}: expected {kind}, got {value!r}")
        return value

    def _text(self, key: str, required: bool, default: str | None) -> str | None:
        value: str | None = self._get(key, (str,), "a string", required, default)
        if value is not None and not value.strip():
            raise ConfigError(f"{self.where} {key}: must not be empty")
        return value

    def required_text(self, key: str) -> str:
        value = self._text(key, True, None)
        assert value is not None  # _get raised if it was missing
        return value

    def text(self, key: str, default: str) -> str:
        value = self._text(key, False, default)
        return default if value is None else value

    def optional_text(self, key: str) -> str | None:
        return self._text(key, False, None)

    def optional_number(self, key: str, *, positive: bool = True) -> float | None:
        value = self._get(key, (int, float), "a number", False, None)
        if value is not None and positive and value <= 0:
            raise ConfigError(f"{self.where} {key}: must be > 0, got {value!r}")
        return None if value is None else float(value)

    def number(self, key: str, default: float) -> float:
        value = self.optional_number(key)
        return default if value is None else value

    def optional_integer(self, key: str) -> int | None:
        value: int | None = self._get(key, (int,), "an integer", False, None)
        if value is not None and value <= 0:
            raise ConfigError(f"{self.where} {key}: must be > 0, got {value!r}")
        return value

    def integer(self, key: str, default: int) -> int:
        value = self.optional_integer(key)
        return default if value is None else value


def _url(section: _Section, key: str, value: str | None) -> str | None:
    if value is not None and not value.startswith(("http://", "https://")):
        raise ConfigError(f"{section.where} {key}: expected an http(s):// URL, got {value!r}")
    return value


def _llm(path: Path, data: object) -> LLMConfig:
    s = _Section(path, "llm", data)
    temperature = s.optional_number("temperature", positive=False)
    if temperature is not None and temperature < 0:
        raise ConfigError(f"{s.where} temperature: must be >= 0, got {temperature!r}")
    model = s.required_text("model")
    base_url = s.required_text("base_url")
    _url(s, "base_url", base_url)
    return LLMConfig(model=model, base_url=base_url, api_key=s.text("api_key", "EMPTY"), temperature=temperature,
                     max_output_tokens=s.optional_integer("max_output_tokens"),
                     timeout_s=s.optional_number("timeout_s"))


def _mars(path: Path, data: object) -> EmitterConfig:
    s = _Section(path, "mars", data)
    hints_raw = s._get("expected_duration_s", (dict,), "a table of tool name = seconds", False, {})
    hints: dict[str, float] = {}
    for tool, secs in hints_raw.items():
        if isinstance(secs, bool) or not isinstance(secs, (int, float)) or secs <= 0:
            raise ConfigError(f"{s.where} expected_duration_s.{tool}: expected seconds > 0, got {secs!r}")
        hints[tool] = float(secs)
    token = os.environ.get(TOKEN_ENV) or s.optional_text("token")
    d = EmitterConfig()
    return EmitterConfig(events_url=_url(s, "events_url", s.optional_text("events_url")), token=token,
                         expected_duration_s=hints, batch_max=s.integer("batch_max", d.batch_max),
                         flush_interval_s=s.number("flush_interval_s", d.flush_interval_s),
                         buffer_size=s.integer("buffer_size", d.buffer_size),
                         exit_flush_timeout_s=s.number("exit_flush_timeout_s", d.exit_flush_timeout_s))


def _agent(path: Path, data: object) -> AgentConfig:
    s = _Section(path, "agent", data)
    tools = s._get("tools", (list,), "a list of tool names", False, list(DEFAULT_TOOLS))
    if not tools or not all(isinstance(t, str) and t for t in tools):
        raise ConfigError(f"{s.where} tools: expected a non-empty list of tool names, got {tools!r}")
    unknown = sorted(set(tools) - set(DEFAULT_TOOLS))
    if unknown:
        raise ConfigError(f"{s.where} tools: unknown tool {unknown[0]!r} (known: {', '.join(DEFAULT_TOOLS)})")
    return AgentConfig(max_iterations=s.integer("max_iterations", 50), tools=tuple(tools))


def _workspace(path: Path, data: object) -> WorkspaceConfig:
    s = _Section(path, "workspace", data)
    base = path.parent
    working = (base / s.text("working_dir", ".")).resolve()
    if not working.is_dir():
        raise ConfigError(f"{s.where} working_dir: {working} is not a directory")
    persist = s.optional_text("persistence_dir")
    return WorkspaceConfig(working_dir=working,
                           persistence_dir=None if persist is None else (base / persist).resolve())


def load_config(path: str | os.PathLike[str]) -> MarsConfig:
    """Read and validate `mars.toml`; raises `ConfigError` naming the file and key on any problem."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"{p}: config file not found")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML: {e}") from None
    unknown = sorted(set(data) - set(TABLES))
    if unknown:
        raise ConfigError(f"{p}: [{unknown[0]}]: unknown table (allowed: {', '.join(sorted(TABLES))})")
    if "llm" not in data:
        raise ConfigError(f"{p}: [llm]: required table missing (needs model and base_url)")
    p = p.resolve()
    return MarsConfig(path=p, llm=_llm(p, data["llm"]), mars=_mars(p, data.get("mars", {})),
                      agent=_agent(p, data.get("agent", {})),
                      workspace=_workspace(p, data.get("workspace", {})))
