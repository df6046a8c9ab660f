"""ISO 4217 currencies and their number of minor units."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal


@dataclass(frozen=True)
class Currency:
    code: str
    exponent: int  # digits after the decimal point: 2 for cents, 0 for yen

    @property
    def minor_unit(self) -> Decimal:
        return Decimal(1).scaleb(-self.exponent)


class UnknownCurrency(KeyError):
    def __str__(self) -> str:
        return f"unknown currency code {self.args[0]!r}"


_REGISTRY = {c.code: c for c in (Currency("EUR", 2), Currency("USD", 2), Currency("GBP", 2),
                                  Currency("JPY", 0), Currency("KWD", 3), Currency("CHF", 2))}


def get_currency(code: str | Currency) -> Currency:
    if isinstance(code, Currency):
        return code
    try:
        return _REGISTRY[code.upper()]
    except KeyError:
        raise UnknownCurrency(code) from None
