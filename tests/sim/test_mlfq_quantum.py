"""MARS' prefill quantum on the simulator: it shares a step, it does not ration an idle one
(docs/policies.md "MLFQ")."""
from mars_openhands.sim import run_simulation
from mars_openhands.workload.trace import SessionTrace, Turn

PROFILE = "h100-qwen3-coder-30b"       # 8192-token steps, 100k tokens of KV
LONG = SessionTrace("long", 0.0, (Turn(60_000, 10),))
SHORT = SessionTrace("short", 1.0, (Turn(500, 10),))


def _finish(sessions: list[SessionTrace], policy: str) -> dict[str, float]:
    run = run_simulation(sessions, PROFILE, policy, check=True)
    return {s.session_id: s.finish_s for s in run.sessions}


def test_a_lone_long_prefill_takes_whole_steps_as_under_fcfs():
    """Alone on the engine, a 60k-token prefill at the lowest level is not cut into 256-token
    chunks (235 steps where FCFS takes 8): no call would use the rest of the budget."""
    mars, fcfs = _finish([LONG], "mars")["long"], _finish([LONG], "fcfs")["long"]
    assert mars <= 1.01 * fcfs


def test_a_short_call_still_overtakes_the_long_prefill_it_joins():
    """Once a short call shares the engine the quantum binds again: it finishes first, while
    FCFS serves the long prompt first."""
    mars, fcfs = _finish([LONG, SHORT], "mars"), _finish([LONG, SHORT], "fcfs")
    assert mars["short"] < mars["long"] and mars["short"] < fcfs["short"]
    assert fcfs["short"] >= fcfs["long"]
