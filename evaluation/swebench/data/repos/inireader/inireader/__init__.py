"""INI-style configuration: lexing, parsing and typed access."""

from inireader.config import Config
from inireader.errors import ConfigError, ParseError
from inireader.parser import load, loads

__all__ = ["Config", "ConfigError", "ParseError", "load", "loads"]
