from datetime import date

import pytest

from datespan import DateSpan, humanize_days


def test_days_is_inclusive():
    assert DateSpan(date(2024, 1, 1), date(2024, 1, 1)).days == 1


def test_reversed_span_rejected():
    with pytest.raises(ValueError, match="before it starts"):
        DateSpan(date(2024, 2, 1), date(2024, 1, 1))


def test_overlap_includes_touching_days():
    a = DateSpan(date(2024, 1, 1), date(2024, 1, 10))
    assert a.overlaps(DateSpan(date(2024, 1, 10), date(2024, 1, 20)))
    assert not a.overlaps(DateSpan(date(2024, 1, 11), date(2024, 1, 20)))


def test_month_starts():
    span = DateSpan(date(2024, 11, 20), date(2025, 1, 5))
    assert list(span.month_starts()) == [date(2024, 11, 1), date(2024, 12, 1), date(2025, 1, 1)]


def test_shift_months_mid_month():
    span = DateSpan(date(2024, 1, 10), date(2024, 1, 20))
    assert span.shift_months(1) == DateSpan(date(2024, 2, 10), date(2024, 2, 20))


@pytest.mark.parametrize(
    "days,text",
    [(0, "0 days"), (1, "1 day"), (9, "1 week, 2 days"), (14, "2 weeks")],
    ids=["zero", "one-day", "week-and-days", "weeks"],
)
def test_humanize_days(days, text):
    assert humanize_days(days) == text
