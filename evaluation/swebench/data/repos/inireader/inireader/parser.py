"""Builds a Config from tokens."""

from __future__ import annotations

from pathlib import Path

from inireader.config import Config
from inireader.errors import ParseError
from inireader.lexer import tokenize


def loads(text: str) -> Config:
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for token in tokenize(text):
        if token.kind == "section":
            if token.name in sections:
                raise ParseError(token.lineno, f"duplicate section [{token.name}]")
            current = sections[token.name] = {}
        elif current is None:
            raise ParseError(token.lineno, f"key {token.name!r} outside of any section")
        elif token.name in current:
            raise ParseError(token.lineno, f"duplicate key {token.name!r}")
        else:
            current[token.name] = token.value
    return Config(sections)


def load(path: str | Path) -> Config:
    return loads(Path(path).read_text(encoding="utf-8"))
