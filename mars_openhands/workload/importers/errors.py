"""Problems found in an input trace, collected so that one run reports all of them (up to a cap).

Every message names the file, the line and the field: `FILE:LINE: field 'requests[3].api_time':
expected a number, got 'x'`. A converter records a problem and carries on with the next record;
`Problems.check` then raises one `ImportFailed` holding them all.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Problems listed before the rest are only counted.
MAX_LISTED = 20


class ImportFailed(ValueError):
    """An input trace that cannot be converted; the message lists the problems, one a line."""


@dataclass(slots=True)
class Problems:
    """Every problem found so far (the first `MAX_LISTED` listed, the rest counted)."""

    messages: list[str] = field(default_factory=list)
    count: int = 0

    def add(self, message: str) -> None:
        self.count += 1
        if len(self.messages) < MAX_LISTED:
            self.messages.append(message)

    def check(self) -> None:
        """Raise `ImportFailed` listing the problems, if there are any."""
        if not self.count:
            return
        more = self.count - len(self.messages)
        tail = [f"... and {more} more problem{'s' if more > 1 else ''}"] if more else []
        raise ImportFailed("\n".join([*self.messages, *tail]))


@dataclass(frozen=True, slots=True)
class Where:
    """One record of the input: its file, its line and the problems list it reports to."""

    file: str
    line: int
    problems: Problems

    def mark(self) -> int:
        """How many problems have been recorded so far: `ok_since(mark)` tells whether more came."""
        return self.problems.count

    def ok_since(self, mark: int) -> bool:
        return self.problems.count == mark

    def problem(self, name: str, message: str) -> None:
        self.problems.add(f"{self.file}:{self.line}: field '{name}': {message}" if name
                          else f"{self.file}:{self.line}: {message}")

    def number(self, obj: Mapping[str, Any], key: str, prefix: str = "", *, integer: bool = False,
               required: bool = True, minimum: float = 0.0, default: float | None = None) -> Any:
        """`obj[key]` if it is a finite number (an integer if asked) >= `minimum`; else a recorded
        problem and None. Missing or null: `default` when not required."""
        name = f"{prefix}{key}"
        v = obj.get(key)
        if v is None:
            if required:
                self.problem(name, "missing")
            return default
        ok = isinstance(v, int) if integer else isinstance(v, (int, float))
        if isinstance(v, bool) or not ok or not math.isfinite(v):
            self.problem(name, f"expected {'an integer' if integer else 'a number'}, got {v!r}")
            return None
        if v < minimum:
            self.problem(name, f"must be >= {minimum:g}, got {v!r}")
            return None
        return v

    def string(self, obj: Mapping[str, Any], key: str, prefix: str = "", *, required: bool = True) -> str | None:
        """`obj[key]` if it is a non-empty string; else a recorded problem (when required or wrong) and None."""
        v = obj.get(key)
        if v is None:
            if required:
                self.problem(f"{prefix}{key}", "missing")
            return None
        if not isinstance(v, str) or not v:
            self.problem(f"{prefix}{key}", f"expected a non-empty string, got {v!r}")
            return None
        return v

    def objects(self, obj: Mapping[str, Any], key: str, prefix: str = "", *,
                required: bool = True) -> list[Mapping[str, Any]] | None:
        """`obj[key]` if it is a list of JSON objects; else a recorded problem and None."""
        v = obj.get(key)
        name = f"{prefix}{key}"
        if v is None:
            if required:
                self.problem(name, "missing")
                return None
            return []
        if not isinstance(v, list):
            self.problem(name, f"expected a list, got {type(v).__name__}")
            return None
        bad = [i for i, x in enumerate(v) if not isinstance(x, Mapping)]
        for i in bad:
            self.problem(f"{name}[{i}]", "expected an object")
        return None if bad else v
