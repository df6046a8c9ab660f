"""Range expressions such as ">=1.2.0 <2.0.0", "^1.4" and "~0.3.1"."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable

from semverlite.parse import parse
from semverlite.version import Version

_OPERATORS: dict[str, Callable[[Version, Version], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "==": operator.eq,
    "=": operator.eq,
}


class InvalidRange(ValueError):
    """The range expression cannot be understood."""


def _partial(text: str) -> tuple[Version, int]:
    """A possibly partial version ("1", "1.2") and how many parts were given."""
    parts = text.split("-", 1)[0].split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise InvalidRange(f"bad version in range: {text!r}")
    padded = parts + ["0"] * (3 - len(parts))
    return parse(".".join(padded) + text[len(text.split("-", 1)[0]):]), len(parts)


def _comparators(term: str) -> list[tuple[Callable[[Version, Version], bool], Version]]:
    if term.startswith("^"):
        low, _ = _partial(term[1:])
        if low.major:
            high = low.bump("major")
        elif low.minor:
            high = low.bump("minor")
        else:
            high = low.bump("patch")
        return [(operator.ge, low), (operator.lt, high)]
    if term.startswith("~"):
        low, given = _partial(term[1:])
        high = low.bump("major") if given == 1 else low.bump("minor")
        return [(operator.ge, low), (operator.lt, high)]
    for symbol in sorted(_OPERATORS, key=len, reverse=True):
        if term.startswith(symbol):
            return [(_OPERATORS[symbol], _partial(term[len(symbol):])[0])]
    return [(operator.eq, _partial(term)[0])]


def satisfies(version: str | Version, spec: str) -> bool:
    """Whether a version is inside every comparator of a space-separated range."""
    terms = spec.split()
    if not terms:
        raise InvalidRange("empty range")
    candidate = parse(version)
    return all(op(candidate, bound) for term in terms for op, bound in _comparators(term))


def max_satisfying(versions: Iterable[str | Version], spec: str) -> Version | None:
    """The highest version in the range, or None when none matches."""
    matching = [parse(v) for v in versions if satisfies(v, spec)]
    return max(matching, default=None)
