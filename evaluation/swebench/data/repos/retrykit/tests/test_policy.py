import random

import pytest

from retrykit import RetryPolicy


def test_delays_grow_exponentially_until_capped():
    policy = RetryPolicy(base_delay=1, max_delay=5, multiplier=2)
    assert [policy.delay(n) for n in range(1, 6)] == [1, 2, 4, 5, 5]


def test_jitter_stays_within_fraction():
    policy = RetryPolicy(base_delay=1, max_delay=1, jitter=0.5, rng=random.Random(7))
    delays = [policy.delay(1) for _ in range(200)]
    assert all(1 <= d <= 1.5 for d in delays) and len(set(delays)) > 100


@pytest.mark.parametrize(
    "kwargs", [{"max_attempts": 0}, {"base_delay": -1}, {"base_delay": 2, "max_delay": 1}, {"jitter": 2}],
    ids=["no-attempts", "negative-delay", "cap-below-base", "jitter-too-big"],
)
def test_invalid_policies(kwargs):
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)
