from datetime import date

import pytest

from datespan import add_months, days_in_month, is_leap_year, month_end


@pytest.mark.parametrize("year,leap", [(2024, True), (2023, False), (1900, False), (2000, True)])
def test_is_leap_year(year, leap):
    assert is_leap_year(year) is leap


def test_days_in_month():
    assert [days_in_month(2024, m) for m in (1, 2, 4)] == [31, 29, 30]
    with pytest.raises(ValueError):
        days_in_month(2024, 13)


def test_month_end():
    assert month_end(date(2023, 2, 10)) == date(2023, 2, 28)


def test_add_months_simple():
    assert add_months(date(2024, 3, 15), 1) == date(2024, 4, 15)
    assert add_months(date(2024, 11, 15), 3) == date(2025, 2, 15)
    assert add_months(date(2024, 1, 15), -2) == date(2023, 11, 15)


def test_add_months_overflow():
    with pytest.raises(OverflowError):
        add_months(date(9999, 12, 1), 1)
