"""Calendar arithmetic and inclusive date spans."""

from datespan.calendar_math import add_months, days_in_month, is_leap_year, month_end
from datespan.fmt import humanize_days
from datespan.span import DateSpan

__all__ = ["DateSpan", "add_months", "days_in_month", "humanize_days", "is_leap_year", "month_end"]
