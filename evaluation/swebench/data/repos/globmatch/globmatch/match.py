"""Matching paths against patterns."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from globmatch.translate import translate


def _normalize(path: str) -> str:
    path = path.replace("\\", "/")
    while path.startswith("./"):
        path = path[2:]
    return path


def match(path: str, pattern: str) -> bool:
    """Whether the whole of ``path`` matches ``pattern``."""
    return translate(pattern).match(_normalize(path)) is not None


def filter_paths(paths: Iterable[str], include: Iterable[str], exclude: Iterable[str] = ()) -> Iterator[str]:
    """Paths matching any include pattern and no exclude pattern, in their given order."""
    include, exclude = list(include), list(exclude)
    for path in paths:
        if any(match(path, p) for p in include) and not any(match(path, p) for p in exclude):
            yield path
