"""Replica-side tolerance in the policy core: inferred tool boundaries, held events, moved sessions."""
from __future__ import annotations

import pytest

from mars_openhands.core import EngineShape, Policy, Request, build_policy
from mars_openhands.core.boundaries import INFERRED_TOOL, BoundaryInference, HeldEvents
from mars_openhands.events import SessionEnded, ToolCancelled, ToolFinished, ToolStarted

SHAPE = EngineShape(total_blocks=10_000, block_size=16, tool_workers=4)


def call(p: Policy, sid: str, start: float, end: float, blocks: int = 100, prompt: int = 1000) -> None:
    """One call of `sid` arrives at `start` and finishes at `end` (its pin recorded as an engine would)."""
    req = Request(f"{sid}@{start}", sid, start, prompt)
    p.on_request_arrival(req, start)
    p.resume_pin(sid)
    req.computed_tokens, req.output_tokens = prompt, 10
    p.on_step([(req, prompt)], [], start)
    d = p.on_request_finished(req, blocks, end)
    if d.pin is not None:
        p.record_pin(sid, blocks, d.pin, end)


def inferred(sid: str, t: float) -> ToolStarted:
    return ToolStarted(sid, t, INFERRED_TOOL)


def test_an_inferred_tool_runs_from_a_tool_calls_finish_to_the_next_call_and_is_learnt():
    p = build_policy("mars", SHAPE)
    for k in range(4):                                    # calls every 10 s, tools of 9 s, no events
        call(p, "a", 10.0 * k, 10.0 * k + 1)
        assert p.on_event(inferred("a", 10.0 * k + 1)) == []
        s = p.session("a")
        assert s.in_tool is not None and s.in_tool.tool_name == INFERRED_TOOL
        assert p.ctx.cpu.tools_in_flight == 0             # never on the tool plane
    assert p.boundaries.stats() == {"inferred_tools": 4, "inferred_tools_measured": 3,
                                    "inferred_tools_open": 1, "evented_sessions": 0}
    durations = p.retention.durations
    assert durations.samples(INFERRED_TOOL, None) == 3
    assert durations.quantile(INFERRED_TOOL, None, 0.5) == pytest.approx(9.0, rel=0.3)
    p.on_request_arrival(Request("a-last", "a", 45.0, 1000), 45.0)
    assert p.session("a").in_tool is None and p.boundaries.measured == 4


def test_real_events_take_precedence_over_inferred_ones():
    p = build_policy("mars", SHAPE)
    call(p, "a", 0.0, 1.0)
    p.on_event(inferred("a", 1.0))
    real = ToolStarted("a", 1.1, "terminal", command="pytest")
    p.on_event(real)                                      # replaces the open inferred tool
    assert p.session("a").in_tool is real and p.ctx.cpu.tools_in_flight == 1
    p.on_event(ToolFinished("a", 3.0, "terminal", 1.9, command="pytest"))
    p.on_request_arrival(Request("a2", "a", 3.5, 1200), 3.5)
    assert p.boundaries.measured == 0                     # the real tool was measured, not a guess
    call(p, "a", 3.5, 4.0)
    p.on_event(inferred("a", 4.0))                        # an evented session is never inferred
    assert p.session("a").in_tool is None and p.boundaries.inferred == 1


def test_an_inferred_start_is_ignored_while_a_call_is_in_the_engine_or_a_tool_was_declared():
    p = build_policy("mars", SHAPE)
    p.on_request_arrival(Request("b1", "b", 0.0, 500), 0.0)
    assert p.ignores(inferred("b", 0.5)) and not p.ignores(ToolStarted("b", 0.5, "terminal"))
    p.on_event(inferred("b", 0.5))                        # next call already arrived: too late
    assert p.session("b").in_tool is None and p.boundaries.inferred == 0
    p.on_event(inferred("nobody", 0.5))                   # unknown session: nothing to infer for
    assert p.boundaries.inferred == 0 and len(p.held) == 0
    call(p, "c", 1.0, 2.0)
    declared = ToolStarted("c", 2.0, "terminal", expected_duration_s=30.0)
    assert p.hint_tool("c", declared)
    p.on_event(inferred("c", 2.0))
    assert p.session("c").in_tool is declared


def test_the_simulator_path_is_unchanged_when_real_events_arrive():
    """Same calls and real events, with and without inferred starts: the same pins and state."""
    def run(with_inferred: bool) -> tuple:
        p = build_policy("mars", SHAPE)
        for k in range(4):
            call(p, "s", 10.0 * k, 10.0 * k + 1)
            p.on_event(ToolStarted("s", 10.0 * k + 1, "terminal", command="ls"))
            if with_inferred:
                p.on_event(inferred("s", 10.0 * k + 1))
            p.on_event(ToolFinished("s", 10.0 * k + 3, "terminal", 2.0, command="ls"))
        pin = p.pin("s")
        return (pin.expires_s if pin else None, p.ctx.cpu.tools_in_flight,
                p.retention.durations.samples("terminal", "ls"), p.retention.durations.samples(INFERRED_TOOL, None))
    assert run(True) == run(False)


def test_tool_events_of_an_unseen_session_are_held_until_its_next_call():
    p = build_policy("mars", SHAPE)
    p.on_event(ToolStarted("m", 1.0, "terminal", command="make"))
    p.on_event(ToolFinished("m", 3.0, "terminal", 2.0, command="make"))
    assert p.ctx.cpu.tools_in_flight == 0                 # counted in and out on the tool plane at once
    assert p.retention.durations.samples("terminal", "make") == 1
    assert len(p.held) == 2 and p.session("m") is None
    p.on_request_arrival(Request("m1", "m", 4.0, 800), 4.0)
    assert p.held.stats() == {"held_events": 0, "held_events_applied": 2, "held_events_dropped": 0}
    assert p.session("m").turns == 1                      # a session that moved here is new here
    assert p.boundaries.evented("m")                      # and reports its own boundaries
    p.on_event(SessionEnded("gone", 5.0))                 # nothing to end: not held
    assert len(p.held) == 0


def test_held_events_expire_and_the_table_is_bounded():
    held = HeldEvents(hold_s=30.0, max_events=2)
    assert held.hold(ToolStarted("x", 0.0, "t"), now=0.0)
    assert held.hold(ToolCancelled("x", 1.0), now=1.0)
    assert not held.hold(ToolStarted("y", 2.0, "t"), now=2.0)      # full: dropped and counted
    assert held.take("x", now=31.0) == []                           # expired before its call came
    assert held.stats() == {"held_events": 0, "held_events_applied": 0, "held_events_dropped": 3}


def test_inference_tables_are_bounded():
    b = BoundaryInference(max_sessions=2)
    for sid in "abc":
        assert b.start(inferred(sid, 0.0))
    assert b.end("a", 1.0) is None and b.end("c", 2.0).duration_s == 2.0
    for sid in "abc":
        b.real_event(SessionEnded(sid, 0.0))
    assert not b.evented("a") and b.evented("c")


def test_a_moved_session_leaves_its_pin_to_expire_on_the_old_replica():
    old, new = build_policy("mars", SHAPE), build_policy("mars", SHAPE)
    call(old, "a", 0.0, 1.0, blocks=200, prompt=3000)
    old.on_event(ToolStarted("a", 1.0, "terminal", command="pytest"))
    pin = old.pin("a")
    assert pin is not None and pin.expires_s < float("inf")
    # The router moves "a": its tool's end and its next call reach the new replica only.
    new.on_event(ToolFinished("a", 20.0, "terminal", 19.0, command="pytest"))
    new.on_request_arrival(Request("a2", "a", 20.5, 3500), 20.5)
    assert new.session("a").turns == 1 and new.pin("a") is None
    assert [x.session_id for x in old.expired_pins(pin.expires_s)] == ["a"]
    assert old.ctx.pins.total_blocks == 0


def test_a_tool_whose_session_moved_leaves_the_tool_planes_when_the_session_is_forgotten():
    old, new = build_policy("mars", SHAPE), build_policy("mars", SHAPE)
    for p in (old, new):
        call(p, "stay", 0.0, 1.0)
        p.on_event(ToolStarted("stay", 1.0, "terminal"))
    call(old, "mover", 0.0, 1.0)
    old.on_event(ToolStarted("mover", 1.0, "terminal"))
    assert old.ctx.cpu.tools_in_flight == 2
    new.on_event(ToolFinished("mover", 5.0, "terminal", 4.0))      # its start was counted elsewhere
    assert new.ctx.cpu.tools_in_flight == 1
    old.on_event(ToolFinished("stay", 2.0, "terminal", 1.0))
    later = 1.0 + old.idle.forget_after_s                            # "mover" never comes back here
    old.expired_pins(later)
    old.release_idle(later)
    assert old.session("mover") is None and old.ctx.cpu.tools_in_flight == 0
    new.on_event(SessionEnded("stay", 6.0))                         # ended mid-tool: off the plane
    assert new.ctx.cpu.tools_in_flight == 0


def test_a_call_that_arrives_before_its_tools_finish_event_ends_them_once():
    """The finish event reaches the engine late (behind the HTTP hop): the next call says the tool
    is over, and the late finish must not take a second call off the host."""
    p = build_policy("mars", SHAPE)
    for sid in ("a", "b"):
        call(p, sid, 0.0, 1.0)
        p.on_event(ToolStarted(sid, 1.0, "terminal"))
    assert p.ctx.cpu.tools_in_flight == 2
    p.on_request_arrival(Request("a#1", "a", 2.0, 1200, turn_index=1), 2.0)
    assert p.ctx.cpu.tools_in_flight == 1                            # "b" still runs its tool
    p.on_event(ToolFinished("a", 1.9, "terminal", 0.9))              # a's finish, late
    assert p.ctx.cpu.tools_in_flight == 1
    p.on_event(ToolFinished("b", 2.5, "terminal", 1.5))
    assert p.ctx.cpu.tools_in_flight == 0
