"""Compiling a glob pattern into a regular expression."""

from __future__ import annotations

import re
from functools import lru_cache


class PatternError(ValueError):
    """The glob pattern is malformed."""


def _char_class(pattern: str, start: int) -> tuple[str, int]:
    """Translate ``[...]`` beginning at ``start``; return the regex and the index after it."""
    end = pattern.find("]", start + 2 if pattern[start + 1 : start + 2] in ("!", "]") else start + 1)
    if end == -1:
        raise PatternError(f"unterminated character class in {pattern!r}")
    body = pattern[start + 1 : end]
    negate = body.startswith("!")
    if negate:
        body = body[1:]
    body = body.replace("\\", "\\\\")
    return ("[^/" if negate else "[") + body + "]", end + 1


@lru_cache(maxsize=256)
def translate(pattern: str) -> re.Pattern[str]:
    if not pattern:
        raise PatternError("empty pattern")
    out = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if pattern.startswith("**/", i):
            out.append(".*/")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif ch == "*":
            out.append("[^/]*")
            i += 1
        elif ch == "?":
            out.append("[^/]")
            i += 1
        elif ch == "[":
            regex, i = _char_class(pattern, i)
            out.append(regex)
        else:
            out.append(re.escape(ch))
            i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)
