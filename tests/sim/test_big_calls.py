"""Calls nearly as big as the KV cache (condensed real sessions) beside pinned context: the engine
must not stall on pins that only the call itself could release."""
from __future__ import annotations

import pytest

from mars_openhands.sim.runner import run_simulation
from tests.sim.helpers import TINY, session

#: 400 blocks of 16 tokens: 6,400 tokens of KV
POLICIES = ["fcfs", "infercept", "continuum", "continuum-dy", "thunderagent", "mars"]


@pytest.mark.parametrize("policy", POLICIES)
def test_a_condensed_call_as_big_as_the_cache_runs_after_its_pinned_turn(policy):
    # turn 1 was condensed: it shares nothing with turn 0, whose KV a policy may pin over the tool,
    # and needs 6,020 of the 6,400 tokens
    s = session("s", 0.0, [(3000, 20, 0.5), (6000, 20, None)], shared={1: 0})
    run = run_simulation([s], TINY, policy, check=True)
    assert run.sessions[0].finish_s is not None


@pytest.mark.parametrize("policy", POLICIES)
def test_big_calls_of_several_sessions_beside_pins_all_finish(policy):
    sessions = [session(f"s{i}", 0.3 * i, [(2500 + 200 * i, 20, 0.2 + 0.1 * i), (6000 - 300 * i, 30, 0.3),
                                           (3000, 20, None)], shared={1: 0, 2: 0}) for i in range(4)]
    run = run_simulation(sessions, TINY, policy, check=True)
    assert all(r.finish_s is not None for r in run.sessions)
