"""Exact money arithmetic."""

from moneybag.allocate import allocate, split_evenly
from moneybag.currency import Currency, UnknownCurrency, get_currency
from moneybag.money import CurrencyMismatch, Money

__all__ = ["Currency", "CurrencyMismatch", "Money", "UnknownCurrency", "allocate", "get_currency", "split_evenly"]
