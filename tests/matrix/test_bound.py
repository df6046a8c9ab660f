"""The clairvoyant-admission bound: MARS' balancer, new sessions by their true length."""
from __future__ import annotations

from mars_openhands.core.balancer import LoadBalancer, Pressure
from mars_openhands.core.model import Session
from mars_openhands.core.registry import EngineShape
from mars_openhands.matrix.bound import BOUND, ClairvoyantBalancer, clairvoyant_policy
from mars_openhands.metrics import summarize
from mars_openhands.sim.profiles import get_profile
from mars_openhands.sim.runner import run_simulation
from mars_openhands.workload.families import family_sessions


def test_new_sessions_go_shortest_true_session_first_after_the_paused_ones():
    sessions = {sid: Session(sid, t, prompt) for sid, t, prompt in
                [("long", 0.0, 100), ("short", 1.0, 9000), ("mid", 2.0, 50), ("paused", 3.0, 10)]}
    sessions["paused"].turns_finished = 1
    balancer = ClairvoyantBalancer({"long": 300.0, "short": 10.0, "mid": 20.0}, LoadBalancer())
    order = balancer.order(list(sessions.values()), 1, Pressure(kv_overloaded=True), lambda t: t, 5.0)
    assert [s.session_id for s in order] == ["paused", "short", "mid", "long"]
    assert balancer.mode == "clairvoyant"       # a pass may not stop at the first session that does not fit


def test_the_bound_runs_mars_with_its_balancer_swapped_in():
    profile = get_profile("h200-qwen3-coder-30b")
    sessions = family_sessions("swe", 4, rate=1.0, seed=0)
    run = run_simulation(sessions, profile, BOUND, tool_workers=4, make_policy=clairvoyant_policy(sessions, profile))
    assert run.policy == BOUND and summarize(run)["completed"] == 4
    policy = clairvoyant_policy(sessions, profile)(EngineShape(1000, 16, 4))
    assert policy.name == BOUND and isinstance(policy.admission.balancer, ClairvoyantBalancer)
