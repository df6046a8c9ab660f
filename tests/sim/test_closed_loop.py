"""Closed-loop arrivals (`sim/closed_loop.py`): N users over the trace, arrivals that follow completions."""
from __future__ import annotations

import pytest

from mars_openhands.events import Event, TurnSubmitted
from mars_openhands.sim.closed_loop import root_of
from mars_openhands.sim.runner import run_simulation
from tests.sim.helpers import TINY, growing

POLICIES = ["fcfs", "thunderagent", "mars"]


def _sessions(n: int = 6) -> list:
    # trace arrivals far apart and out of the replay order: a closed loop ignores them but keeps the order
    return [growing(f"s{i}", 1000.0 * (i + 1), 3 + i % 3) for i in range(n)]


@pytest.mark.parametrize("policy", POLICIES)
def test_one_user_runs_the_sessions_back_to_back_in_trace_order(policy):
    run = run_simulation(_sessions(), TINY, policy, concurrency=1)
    by_id = {s.session_id: s for s in run.sessions}
    order = [f"s{i}" for i in range(6)]
    assert by_id["s0"].arrival_s == 0.0
    for prev, nxt in zip(order, order[1:]):
        assert by_id[nxt].arrival_s == pytest.approx(by_id[prev].finish_s)
    # alone on the engine: each session takes its ideal time plus nothing but the batch-1 steps
    assert all(s.finish_s - s.arrival_s >= s.ideal_s * 0.99 for s in run.sessions)


@pytest.mark.parametrize("policy", POLICIES)
def test_n_users_keep_n_sessions_in_flight_until_the_trace_runs_out(policy):
    run = run_simulation(_sessions(), TINY, policy, concurrency=3)
    starts = sorted(s.arrival_s for s in run.sessions)
    assert starts[:3] == [0.0, 0.0, 0.0] and all(t > 0 for t in starts[3:])
    ends = sorted(s.finish_s for s in run.sessions)
    # each later session starts at the moment one in flight ended
    assert all(any(t == pytest.approx(e) for e in ends) for t in starts[3:])
    for t in [x + 1e-9 for x in starts]:
        in_flight = sum(1 for s in run.sessions if s.arrival_s <= t < s.finish_s)
        assert in_flight <= 3


def test_more_users_than_sessions_start_everything_at_once():
    run = run_simulation(_sessions(4), TINY, "fcfs", concurrency=10)
    assert [s.arrival_s for s in run.sessions] == [0.0] * 4


def test_a_sub_agent_arrives_with_its_root_and_holds_its_user():
    parent = growing("p", 10.0, 4, tool=2.0)
    child = growing("p/agent_1", 10.5, 2)               # sent 0.5 s after its parent started
    other = growing("q", 20.0, 2)
    seen: list[tuple[str, float]] = []

    def listen(e: Event) -> None:
        if isinstance(e, TurnSubmitted) and e.turn_index == 0:
            seen.append((e.session_id, e.t))
    run = run_simulation([parent, child, other], TINY, "fcfs", concurrency=1, on_event=listen)
    t = dict(seen)
    assert t["p"] == 0.0 and t["p/agent_1"] == pytest.approx(0.5)
    fin = {s.session_id: s.finish_s for s in run.sessions}
    assert t["q"] == pytest.approx(max(fin["p"], fin["p/agent_1"]))


def test_root_of_follows_the_importers_id_conventions():
    ids = {"a", "a/agent_1", "a#2", "b/x"}
    assert root_of("a/agent_1", ids) == "a"
    assert root_of("a#2", ids) == "a"
    assert root_of("b/x", ids) == "b/x"            # no session "b": its own user


def test_zero_users_are_refused():
    with pytest.raises(ValueError, match="concurrency must be >= 1"):
        run_simulation(_sessions(2), TINY, "fcfs", concurrency=0)
