"""Where a session's time went (`metrics.time_breakdown`), alike in both simulator engines: each
call's timing is recorded, and the parts add up to each session's E2E."""
from __future__ import annotations

import pytest

from mars_openhands.metrics import BREAKDOWN, summarize
from mars_openhands.sim.cluster import run_cluster
from mars_openhands.vsim import run_vllm_simulation

from .traces import TINY, small_trace

ENGINES = {"sim": lambda trace, policy: run_cluster(trace, TINY, policy),
           "vllm": lambda trace, policy: run_vllm_simulation(trace, TINY, policy)}


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("policy", ["fcfs", "mars"])
def test_each_call_is_timed_and_the_parts_add_up_to_the_sessions_e2e(engine, policy):
    trace = small_trace(3)
    run = ENGINES[engine](trace, policy)
    by_session = {s.session_id: s for s in trace}
    for r in run.sessions:
        assert r.finish_s is not None
        rows = [t for t in run.turns if t.session_id == r.session_id]
        tr = by_session[r.session_id]
        assert [t.turn for t in rows] == list(range(len(tr.turns)))
        assert rows[0].submitted_s == pytest.approx(r.arrival_s)
        for t, turn in zip(rows, tr.turns):
            assert t.submitted_s <= t.first_token_s <= t.finished_s
            if turn.tool is None:
                assert t.tool_queue_wait_s == t.tool_run_s == 0.0
            else:
                assert t.tool_run_s == pytest.approx(turn.tool.duration_s)
        # no hop takes time here: the session's time is its calls' and its tools'
        spent = sum(t.finished_s - t.submitted_s + t.tool_queue_wait_s + t.tool_run_s for t in rows)
        assert spent == pytest.approx(r.finish_s - r.arrival_s, abs=1e-6)
    s = summarize(run)
    assert sum(s[k] for k in BREAKDOWN) == pytest.approx(s["mean_e2e_s"], abs=1e-3)


def test_the_gate_shows_as_the_first_calls_wait():
    """MARS' admission holds new sessions where FCFS lets them in: the first call's wait is where
    its time goes, and the later calls' is what it buys."""
    trace = small_trace(3, n=16, rate=4.0)
    fcfs, mars = (summarize(run_vllm_simulation(trace, TINY, p)) for p in ("fcfs", "mars"))
    assert mars["first_wait_s"] > fcfs["first_wait_s"]
