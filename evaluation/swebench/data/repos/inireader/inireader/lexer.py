"""Splits INI text into tokens, one per meaningful line."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from inireader.errors import ParseError

COMMENT_PREFIXES = ("#", ";")


@dataclass(frozen=True)
class Token:
    kind: str  # "section" or "pair"
    lineno: int
    name: str
    value: str = ""


def tokenize(text: str) -> Iterator[Token]:
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(COMMENT_PREFIXES):
            continue
        if line.startswith("["):
            if not line.endswith("]") or len(line) < 3:
                raise ParseError(lineno, f"malformed section header {line!r}")
            yield Token("section", lineno, line[1:-1].strip())
            continue
        if "=" not in line:
            raise ParseError(lineno, f"expected 'key = value', got {line!r}")
        parts = line.split("=")
        key, value = parts[0].strip(), parts[1].strip()
        if not key:
            raise ParseError(lineno, "empty key")
        yield Token("pair", lineno, key.lower(), _unquote(value))


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value
