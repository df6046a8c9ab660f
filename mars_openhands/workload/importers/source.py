"""The JSON records of an input trace, each with where it came from (file and line).

Accepted: a JSON Lines file (one record a line, blank lines skipped), the same gzip-compressed
(`.gz`), a `.json` file holding one record (the whole document, reported as line 1), or a directory
of such files (read in name order).
"""
from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from mars_openhands.workload.importers.errors import ImportFailed, Problems, Where

_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz")


def _open(path: Path) -> IO[str]:
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")


def _files(path: Path, keep: Callable[[Path], bool] | None) -> list[Path]:
    if not path.is_dir():
        return [path]
    files = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(_SUFFIXES))
    if not files:
        raise ImportFailed(f"{path}: no trace files (*{', *'.join(_SUFFIXES)}) in the directory")
    return files if keep is None else [f for f in files if keep(f)]


def _whole_document(path: Path) -> bool:
    return path.name.endswith((".json", ".json.gz"))


def records(path: Path, problems: Problems, keep: Callable[[Path], bool] | None = None
            ) -> Iterator[tuple[Where, Mapping[str, Any]]]:
    """Every JSON object of `path` with its location; a line that is not one is a recorded problem.
    In a directory, only the files `keep` accepts are opened.

    Raises `ImportFailed` at once if a file cannot be read at all.
    """
    for file in _files(path, keep):
        try:
            with _open(file) as f:
                if _whole_document(file):
                    yield from _parse([(1, f.read())], str(file), problems)
                else:
                    yield from _parse(enumerate(f, 1), str(file), problems)
        except (OSError, EOFError, UnicodeDecodeError) as e:
            raise ImportFailed(f"{file}: cannot read: {getattr(e, 'strerror', None) or e}") from None


def _parse(lines: Any, name: str, problems: Problems) -> Iterator[tuple[Where, Mapping[str, Any]]]:
    for lineno, line in lines:
        if not line.strip():
            continue
        where = Where(name, lineno, problems)
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            where.problem("", f"not JSON ({e.msg})")
            continue
        if not isinstance(obj, Mapping):
            where.problem("", f"expected a JSON object, got {type(obj).__name__}")
            continue
        yield where, obj
