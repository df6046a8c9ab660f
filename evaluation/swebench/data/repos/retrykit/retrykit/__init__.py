"""Retrying flaky calls with backoff."""

from retrykit.errors import RetryError
from retrykit.policy import RetryPolicy
from retrykit.retry import call_with_retry, retry

__all__ = ["RetryError", "RetryPolicy", "call_with_retry", "retry"]
