"""The router models of `sim/routing.py`: vllm-router 0.1.17's `sticky_least_loaded` table."""
from __future__ import annotations

import pytest

from mars_openhands.sim.routing import StickyLeastLoaded


def test_a_session_sticks_to_its_replica_until_it_is_finished():
    r = StickyLeastLoaded(3)
    home = r.route("a", 0.0)
    for t in (1.0, 50.0, 3000.0):
        r.route("x" + str(t), t)                    # other sessions come and go
        assert r.route("a", t) == home
    assert r.counts[home] >= 1 and r.table["a"] == home
    r.finish("a")
    assert "a" not in r.table and r.finished == 1
    r.finish("a")                                   # unknown session: a no-op, as the router's
    assert r.finished == 1 and sum(r.counts) == len(r.table)


def test_new_sessions_go_to_the_replica_with_the_fewest_sessions():
    r = StickyLeastLoaded(3)
    first = [r.route(f"s{i}", 0.0) for i in range(3)]
    assert sorted(first) == [0, 1, 2]               # one each, whatever the hash says
    r.finish("s0")
    r.finish("s1")
    assert r.route("new-1", 1.0) in (first[0], first[1])
    assert r.route("new-2", 1.0) in (first[0], first[1])
    assert r.counts == [1, 1, 1]


def test_the_load_signal_is_sessions_not_requests():
    r = StickyLeastLoaded(2)
    busy = r.route("busy", 0.0)
    for t in range(100):                            # one session's many calls weigh as one
        r.route("busy", float(t))
    idle = r.route("other", 100.0)
    assert idle != busy
    third = r.route("third", 100.0)                  # 1 vs 1: a tie, broken by the session's hash
    assert r.counts[third] == 2 and r.placed == 3


def test_ties_are_broken_by_the_session_id_alone():
    picks = {StickyLeastLoaded(4).route(f"conv-{i}", 0.0) for i in range(64)}
    assert picks == {0, 1, 2, 3}                    # spread over replicas ...
    assert all(StickyLeastLoaded(4).route(f"conv-{i}", 0.0) == StickyLeastLoaded(4).route(f"conv-{i}", 9.0)
               for i in range(16))                  # ... and the same for the same id


def test_a_session_whose_replica_is_down_is_placed_again_and_sticks_there():
    r = StickyLeastLoaded(3)
    home = r.route("a", 0.0)
    survivors = [i for i in range(3) if i != home]
    moved = r.route("a", 1.0, healthy=survivors)
    assert moved in survivors and r.rebound == 1
    assert r.counts[home] == 0 and r.counts[moved] == 1
    assert r.route("a", 2.0) == moved              # the old replica is back: the session stays
    with pytest.raises(ValueError, match="no healthy replica"):
        r.route("b", 3.0, healthy=[])


def test_idle_sessions_expire_after_two_hours_at_the_next_sweep():
    r = StickyLeastLoaded(2)
    r.route("old", 0.0)
    r.route("kept", 0.0)
    r.route("kept", 7000.0)
    r.route("probe", 7199.0)                        # a sweep: nothing 7,200 s idle yet
    assert "old" in r.table
    r.route("probe", 7230.0)                        # 'old' is past its TTL, but sweeps are 60 s apart
    assert "old" in r.table
    r.route("probe", 7260.0)                        # swept: 'old' idle 7,260 s, 'kept' 260 s
    assert "old" not in r.table and "kept" in r.table and r.expired == 1
    assert sum(r.counts) == len(r.table) == 2


def test_no_replicas_is_refused():
    with pytest.raises(ValueError, match="replicas must be >= 1"):
        StickyLeastLoaded(0)
