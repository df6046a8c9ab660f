"""The stall watchdog: unit tests on fed samples (a test double of the engine's signals), then a
replay against a fake engine whose gate holds one session's calls while the engine idles."""
import time

import pytest

from mars_openhands.replay.client import engine_activity
from mars_openhands.replay.watchdog import EngineActivity, StallWatchdog
from mars_openhands.workload.trace import SessionTrace, ToolCall, Turn
from tests.replay.replay_fake_engine import FakeEngine, ServedFake
from tests.replay.replay_fake_engine import replay as _replay

IDLE_HELD = EngineActivity(running=0, waiting=0, held=1)
BUSY = EngineActivity(running=1, waiting=0, held=0)
ONE_CALL = {("big", 0): 0.0}


def feed(w: StallWatchdog, samples, outstanding=ONE_CALL, tools=0):
    """Samples one second apart: (activity, progress) each; the first stall, if any."""
    for t, (activity, progress) in enumerate(samples):
        stall = w.observe(float(t), activity, outstanding, progress, tools)
        if stall is not None:
            return stall
    return None


def test_an_idle_engine_with_a_call_outstanding_is_a_stall_after_the_threshold():
    w = StallWatchdog(after_s=3.0)
    stall = feed(w, [(BUSY, 0), (BUSY, 0)] + [(IDLE_HELD, 0)] * 10)
    assert stall is not None and stall.at_s == 5.0 and stall.idle_s == 3.0
    assert stall.calls == (("big", 0, 5.0),) and stall.held == 1
    assert stall.held_idle_s == 4.0                # the idle samples after the busy one, 1 s apart
    assert "engine idle 3 s with 1 call(s) outstanding, 1 held by the policy: big turn 0 (5 s)" in stall.describe()
    assert stall.as_dict()["calls"] == [{"session_id": "big", "turn": 0, "outstanding_s": 5.0}]


@pytest.mark.parametrize("case", ["busy-between", "progress", "tool-running", "nothing-outstanding", "unknown"])
def test_what_is_not_a_stall(case):
    w = StallWatchdog(after_s=3.0)
    idle = [(IDLE_HELD, 0)] * 10
    if case == "busy-between":                      # the engine works now and then: idle never lasts 3 s
        assert feed(w, [(IDLE_HELD, 0), (IDLE_HELD, 0), (BUSY, 0)] * 4) is None
    elif case == "progress":                        # calls keep finishing between the samples
        assert feed(w, [(IDLE_HELD, i // 2) for i in range(12)]) is None
    elif case == "tool-running":                    # a tool may yet finish and move things on
        assert feed(w, idle, tools=1) is None
    elif case == "nothing-outstanding":             # the agents are between calls
        assert feed(w, idle, outstanding={}) is None
    else:                                           # no signal from the engine: never guess a stall
        assert feed(w, [(None, 0)] * 10) is None


def test_held_idle_time_counts_only_what_the_policy_held():
    w = StallWatchdog(after_s=100.0)
    not_held = EngineActivity(0, 0, 0)
    unknown = EngineActivity(0, 0, None)            # a stock server holds nothing outside its queues
    assert feed(w, [(BUSY, 0), (IDLE_HELD, 0), (IDLE_HELD, 0), (not_held, 0), (unknown, 0), (BUSY, 0)]) is None
    assert w.held_idle_s == 2.0


def test_the_engine_activity_comes_from_the_mars_stats_else_vllms_gauges():
    stats = {"engine": {"running": 0, "waiting": 2, "parked_requests": 3, "overflow_requests": 1}}
    gauges = {"vllm:num_requests_running": 1.0, "vllm:num_requests_waiting": 5.0}
    assert engine_activity(stats, gauges) == EngineActivity(0, 2, 4)     # waiting: vLLM's queues only
    assert engine_activity({"admission": {}}, gauges) == EngineActivity(1, 5, None)
    assert engine_activity(None, {}) is None


def test_a_replay_whose_gate_never_admits_a_session_ends_with_a_stall_verdict():
    """Session "big" is held unanswered while the engine reports itself idle; "small" finishes. The
    replay ends about `stall_after_s` after "small" did, names the held call, and the engine sees
    the held call's client go away (nothing is left waiting)."""
    big = SessionTrace("big", 0.0, (Turn(64, 4),), "sys", 32)
    small = SessionTrace("small", 0.0, (Turn(40, 4, ToolCall("terminal", 0.1, 1.0, "ls")), Turn(50, 4)), "sys", 32)
    with ServedFake(FakeEngine(hold={"big"})) as engine:
        t0 = time.monotonic()
        out = _replay(engine.url, [big, small], stall_after_s=0.5)
        took = time.monotonic() - t0
        deadline = time.monotonic() + 5
        while engine.held and time.monotonic() < deadline:
            time.sleep(0.02)
        assert engine.held == 0
    assert took < 10
    assert out.stall is not None and [c[:2] for c in out.stall.calls] == [("big", 0)]
    assert out.stall.held == 1 and out.stall.idle_s >= 0.5 and out.held_idle_s > 0.5
    rec_big, rec_small = out.sessions
    assert rec_small.finish_s is not None and rec_small.error is None
    assert rec_big.finish_s is None and rec_big.error.startswith("the replay stalled (stalled: engine idle")
