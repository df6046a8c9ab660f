"""Short human-readable durations."""

from __future__ import annotations


def humanize_days(days: int) -> str:
    if days < 0:
        raise ValueError("a duration cannot be negative")
    if days == 0:
        return "0 days"
    weeks, rest = divmod(days, 7)
    parts = []
    if weeks:
        parts.append(f"{weeks} week" + ("s" if weeks > 1 else ""))
    if rest:
        parts.append(f"{rest} day" + ("s" if rest > 1 else ""))
    return ", ".join(parts)
