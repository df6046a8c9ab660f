"""Inclusive date ranges."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date

from datespan.calendar_math import add_months


@dataclass(frozen=True)
class DateSpan:
    """From ``start`` to ``end``, both days included."""

    start: date
    end: date

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"span ends ({self.end}) before it starts ({self.start})")

    @property
    def days(self) -> int:
        return (self.end - self.start).days + 1

    def __contains__(self, day: date) -> bool:
        return self.start <= day <= self.end

    def overlaps(self, other: DateSpan) -> bool:
        return self.start <= other.end and other.start <= self.end

    def shift_months(self, months: int) -> DateSpan:
        return DateSpan(add_months(self.start, months), add_months(self.end, months))

    def month_starts(self) -> Iterator[date]:
        """The first day of every calendar month the span touches."""
        current = self.start.replace(day=1)
        while current <= self.end:
            yield current
            current = add_months(current, 1)
