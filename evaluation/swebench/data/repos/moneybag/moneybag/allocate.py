"""Splitting an amount into parts by ratio."""

from __future__ import annotations

from collections.abc import Sequence

from moneybag.money import Money


def allocate(money: Money, ratios: Sequence[int]) -> list[Money]:
    """Split ``money`` in proportion to ``ratios``, one part per ratio."""
    if not ratios or any(r < 0 for r in ratios) or sum(ratios) == 0:
        raise ValueError(f"ratios must be non-negative with a positive sum, got {list(ratios)}")
    units = money.minor_units
    weight = sum(ratios)
    shares = [units * r // weight for r in ratios]
    return [Money.from_minor_units(s, money.currency) for s in shares]


def split_evenly(money: Money, parts: int) -> list[Money]:
    if parts < 1:
        raise ValueError(f"parts must be at least 1, got {parts}")
    return allocate(money, [1] * parts)
