"""MARS contains ThunderAgent: where none of its additions has anything to act on, a run under
`mars` is the run under `thunderagent`, session for session (docs/policies.md#mars-and-thunderagent).

Nothing to act on: a few sessions at once, which the session window (4 at first, growing while
it binds) never holds back; prompts the MLFQ's first quantum covers; a cache the admitted contexts
fit, so no pin is needed, no chunk is shrunk and nobody is paused. Where the cache is scarce, the
additions act and the runs part.
"""
from __future__ import annotations

import pytest

from mars_openhands.sim.runner import run_simulation
from tests.sim.helpers import TINY, growing


def e2e(sessions, policy: str, **kw) -> dict[str, float | None]:
    return {s.session_id: s.e2e_s for s in run_simulation(sessions, TINY, policy, check=True, **kw).sessions}


@pytest.mark.parametrize("arrivals", [
    pytest.param([30.0 * i for i in range(5)], id="one-at-a-time"),
    pytest.param([1.0 * i for i in range(2)], id="two-overlapping"),
    pytest.param([0.5 * i for i in range(4)], id="four-overlapping"),
])
def test_with_nothing_to_act_on_mars_runs_as_thunderagent_exactly(arrivals):
    sessions = [growing(f"s{i}", t, 5, first=300, grow=80, out=20, tool=0.5) for i, t in enumerate(arrivals)]
    assert e2e(sessions, "mars") == e2e(sessions, "thunderagent")


def test_on_a_scarce_cache_the_additions_act_and_mars_is_faster():
    sessions = [growing(f"s{i}", 0.5 * i, 5, first=300, grow=80, out=20, tool=0.5) for i in range(4)]
    mars, thunder = e2e(sessions, "mars", kv_blocks=80), e2e(sessions, "thunderagent", kv_blocks=80)
    assert sum(filter(None, mars.values())) < 0.8 * sum(filter(None, thunder.values()))
