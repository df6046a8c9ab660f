"""Typed access to parsed sections."""

from __future__ import annotations

from dataclasses import dataclass

from inireader.errors import ConfigError

_TRUE = {"1", "yes", "true", "on"}
_FALSE = {"0", "no", "false", "off"}


@dataclass
class Config:
    sections: dict[str, dict[str, str]]

    def get(self, section: str, key: str, default: str | None = None) -> str:
        try:
            return self.sections[section][key.lower()]
        except KeyError:
            if default is not None:
                return default
            raise ConfigError(f"no option {key!r} in section [{section}]") from None

    def get_int(self, section: str, key: str) -> int:
        value = self.get(section, key)
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"[{section}] {key} = {value!r} is not an integer") from None

    def get_bool(self, section: str, key: str) -> bool:
        value = self.get(section, key).lower()
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise ConfigError(f"[{section}] {key} = {value!r} is not a boolean")

    def get_list(self, section: str, key: str, sep: str = ",") -> list[str]:
        return [item.strip() for item in self.get(section, key).split(sep) if item.strip()]
