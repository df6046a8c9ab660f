"""Calling with retries."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar

from retrykit.errors import RetryError
from retrykit.policy import RetryPolicy

T = TypeVar("T")


def call_with_retry(
    func: Callable[..., T],
    *args: Any,
    policy: RetryPolicy | None = None,
    on: tuple[type[BaseException], ...] = (Exception,),
    sleep: Callable[[float], None] = time.sleep,
    **kwargs: Any,
) -> T:
    """Call ``func`` until it succeeds or ``policy.max_attempts`` calls have failed."""
    policy = policy or RetryPolicy()
    attempt = 0
    while True:
        attempt += 1
        try:
            return func(*args, **kwargs)
        except on as exc:
            if attempt > policy.max_attempts:
                raise RetryError(attempt, exc) from exc
            sleep(policy.delay(attempt))


def retry(policy: RetryPolicy | None = None, on: tuple[type[BaseException], ...] = (Exception,),
          sleep: Callable[[float], None] = time.sleep) -> Callable[[Callable[..., T]], Callable[..., T]]:
    def decorate(func: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> T:
            return call_with_retry(func, *args, policy=policy, on=on, sleep=sleep, **kwargs)

        return wrapper

    return decorate
