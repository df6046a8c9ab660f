"""Query strings in the application/x-www-form-urlencoded style."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from urlkit.encoding import SUB_DELIMS, quote, unquote

Pairs = Iterable[tuple[str, str]]

# Characters left readable in query components.
_QUERY_SAFE = "".join(sorted(SUB_DELIMS | set(":@/?")))


def _encode(text: str) -> str:
    return quote(text, safe=_QUERY_SAFE).replace("%20", "+")


def build_query(params: Mapping[str, str | Iterable[str]] | Pairs) -> str:
    """Encode params; a mapping value that is a list becomes repeated keys."""
    items = params.items() if isinstance(params, Mapping) else params
    parts = []
    for key, value in items:
        values = [value] if isinstance(value, str) else list(value)
        parts.extend(f"{_encode(key)}={_encode(v)}" for v in values)
    return "&".join(parts)


def parse_query(query: str) -> dict[str, list[str]]:
    """Decode a query string; every key maps to the list of its values, in order."""
    result: dict[str, list[str]] = {}
    for part in query.lstrip("?").split("&"):
        if not part:
            continue
        key, _, value = part.partition("=")
        result.setdefault(unquote(key, plus_is_space=True), []).append(unquote(value, plus_is_space=True))
    return result
