from decimal import Decimal

import pytest

from moneybag import CurrencyMismatch, Money, UnknownCurrency
from moneybag.money import total


def test_amount_is_quantized_to_currency():
    assert Money("1.005", "EUR").amount == Decimal("1.00")
    assert Money("1.015", "EUR").amount == Decimal("1.02")
    assert Money("150", "JPY").amount == Decimal("150")


def test_addition_and_currency_mismatch():
    assert Money("1.10", "USD") + Money("2.25", "USD") == Money("3.35", "USD")
    with pytest.raises(CurrencyMismatch):
        Money("1", "USD") + Money("1", "EUR")


def test_float_rejected():
    with pytest.raises(TypeError):
        Money(0.1, "USD")


def test_unknown_currency():
    with pytest.raises(UnknownCurrency, match="XXX"):
        Money("1", "XXX")


def test_minor_units_round_trip():
    m = Money("12.345", "KWD")
    assert m.minor_units == 12345
    assert Money.from_minor_units(12345, "KWD") == m


def test_total():
    assert total([Money("0.10", "EUR")] * 3) == Money("0.30", "EUR")
