import pytest

from moneybag import Money, allocate, split_evenly


def test_even_split_without_remainder():
    assert split_evenly(Money("10.00", "EUR"), 2) == [Money("5.00", "EUR")] * 2


def test_allocate_by_ratio_exact():
    parts = allocate(Money("100.00", "USD"), [70, 20, 10])
    assert parts == [Money("70.00", "USD"), Money("20.00", "USD"), Money("10.00", "USD")]


def test_zero_ratio_gets_nothing():
    assert allocate(Money("9", "JPY"), [0, 1])[0] == Money("0", "JPY")


@pytest.mark.parametrize("ratios", [[], [0, 0], [1, -1]])
def test_invalid_ratios(ratios):
    with pytest.raises(ValueError, match="ratios"):
        allocate(Money("1.00", "EUR"), ratios)
