"""Exceptions raised by inireader."""


class ConfigError(Exception):
    """Base class for every inireader error."""


class ParseError(ConfigError):
    """The text is not valid INI; carries the 1-based line number."""

    def __init__(self, lineno: int, message: str) -> None:
        super().__init__(f"line {lineno}: {message}")
        self.lineno = lineno
