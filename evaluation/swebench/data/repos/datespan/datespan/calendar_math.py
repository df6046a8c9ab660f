"""Month arithmetic on the proleptic Gregorian calendar."""

from __future__ import annotations

from datetime import date

_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def is_leap_year(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year: int, month: int) -> int:
    if not 1 <= month <= 12:
        raise ValueError(f"month must be 1..12, got {month}")
    return 29 if month == 2 and is_leap_year(year) else _DAYS[month - 1]


def month_end(day: date) -> date:
    return day.replace(day=days_in_month(day.year, day.month))


def add_months(day: date, months: int) -> date:
    """The same day ``months`` later (or earlier), clamped to the end of a shorter month."""
    index = day.year * 12 + (day.month - 1) + months
    year, month = divmod(index, 12)
    month += 1
    if not 1 <= year <= 9999:
        raise OverflowError(f"{day} + {months} months is outside the supported years")
    return date(year, month, min(day.day, days_in_month(day.year, day.month)))
