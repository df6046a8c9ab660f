import pytest

from retrykit import RetryError, RetryPolicy, call_with_retry, retry


class Flaky:
    def __init__(self, failures: int, exc: type[Exception] = ConnectionError) -> None:
        self.failures, self.exc, self.calls = failures, exc, 0

    def __call__(self, value: str = "ok") -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.exc(f"failure {self.calls}")
        return value


def test_returns_first_success():
    flaky, sleeps = Flaky(2), []
    assert call_with_retry(flaky, "v", policy=RetryPolicy(max_attempts=5), sleep=sleeps.append) == "v"
    assert flaky.calls == 3
    assert sleeps == [0.1, 0.2]


def test_other_exceptions_are_not_retried():
    flaky = Flaky(1, exc=KeyError)
    with pytest.raises(KeyError):
        call_with_retry(flaky, on=(ConnectionError,), sleep=lambda s: None)
    assert flaky.calls == 1


def test_decorator_passes_arguments():
    flaky = Flaky(1)
    wrapped = retry(RetryPolicy(max_attempts=2), sleep=lambda s: None)(flaky)
    assert wrapped(value="x") == "x"


def test_gives_up_with_retry_error():
    flaky = Flaky(100)
    with pytest.raises(RetryError) as info:
        call_with_retry(flaky, policy=RetryPolicy(max_attempts=2), sleep=lambda s: None)
    assert isinstance(info.value.last, ConnectionError)
