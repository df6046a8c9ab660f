"""The error raised when every attempt failed."""

from __future__ import annotations


class RetryError(Exception):
    def __init__(self, attempts: int, last: BaseException) -> None:
        super().__init__(f"gave up after {attempts} attempt(s): {type(last).__name__}: {last}")
        self.attempts = attempts
        self.last = last
