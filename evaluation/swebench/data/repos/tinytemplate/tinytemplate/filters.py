"""Built-in filters and the Markup type for text that is already safe HTML."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any


class Markup(str):
    """A string that must not be escaped again."""


def escape(value: Any) -> Markup:
    if isinstance(value, Markup):
        return value
    return Markup(html.escape(str(value), quote=True))


def _join(value: Any, sep: str = ", ") -> str:
    return sep.join(str(v) for v in value)


def _default(value: Any, fallback: str = "") -> Any:
    return value if value not in (None, "") else fallback


def _truncate(value: Any, length: str = "20") -> str:
    text, limit = str(value), int(length)
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "\u2026"


FILTERS: dict[str, Callable[..., Any]] = {
    "upper": lambda v: str(v).upper(),
    "lower": lambda v: str(v).lower(),
    "title": lambda v: str(v).title(),
    "length": len,
    "join": _join,
    "default": _default,
    "truncate": _truncate,
    "escape": escape,
    "safe": lambda v: Markup(str(v)),
}
