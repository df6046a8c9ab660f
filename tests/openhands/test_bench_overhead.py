"""Emitting MARS events costs the agent well under 1 ms per tool call (real patched SDK path)."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.agent


def test_overhead_per_tool_call_under_one_ms():
    from mars_openhands.openhands.bench_overhead import LIMIT_S, measure

    r = measure(calls_per_block=200, blocks=5)
    assert r["sent"] == 400 and r["dropped"] == 0  # the events really went out
    assert r["overhead_s"] < LIMIT_S, r
