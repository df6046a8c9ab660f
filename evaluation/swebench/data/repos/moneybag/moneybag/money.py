"""The Money value type."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal

from moneybag.currency import Currency, get_currency


class CurrencyMismatch(ValueError):
    """Arithmetic between different currencies."""


@dataclass(frozen=True, init=False)
class Money:
    amount: Decimal
    currency: Currency

    def __init__(self, amount: Decimal | int | str, currency: str | Currency) -> None:
        cur = get_currency(currency)
        if isinstance(amount, float):
            raise TypeError("use str or Decimal for money, not float")
        value = Decimal(amount).quantize(cur.minor_unit, rounding=ROUND_HALF_EVEN)
        object.__setattr__(self, "amount", value)
        object.__setattr__(self, "currency", cur)

    def __str__(self) -> str:
        return f"{self.amount} {self.currency.code}"

    def _same(self, other: Money) -> None:
        if not isinstance(other, Money):
            raise TypeError(f"expected Money, got {type(other).__name__}")
        if other.currency != self.currency:
            raise CurrencyMismatch(f"{self.currency.code} and {other.currency.code} cannot be combined")

    def __add__(self, other: Money) -> Money:
        self._same(other)
        return Money(self.amount + other.amount, self.currency)

    def __sub__(self, other: Money) -> Money:
        self._same(other)
        return Money(self.amount - other.amount, self.currency)

    def __mul__(self, factor: int | Decimal) -> Money:
        return Money(self.amount * Decimal(factor), self.currency)

    def __neg__(self) -> Money:
        return Money(-self.amount, self.currency)

    @property
    def minor_units(self) -> int:
        """The amount as an integer count of minor units (cents, yen, fils)."""
        return int(self.amount.scaleb(self.currency.exponent))

    @classmethod
    def from_minor_units(cls, units: int, currency: str | Currency) -> Money:
        cur = get_currency(currency)
        return cls(Decimal(units).scaleb(-cur.exponent), cur)


def total(items: list[Money]) -> Money:
    if not items:
        raise ValueError("cannot total an empty list: the currency is unknown")
    result = items[0]
    for item in items[1:]:
        result = result + item
    return result
