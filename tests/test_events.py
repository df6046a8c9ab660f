"""The unified event schema: round trips and errors that name the field."""
import pytest

from mars_openhands.events import (
    EVENT_TYPES,
    CpuTelemetry,
    EngineTelemetry,
    EventError,
    SessionEnded,
    ToolCancelled,
    ToolFinished,
    ToolStarted,
    TurnSubmitted,
    parse_batch,
    parse_event,
)

SAMPLES = [
    TurnSubmitted("s1", 1.0, turn_index=2, prompt_tokens=900, request_id="r"),
    ToolStarted("s1", 2.0, "terminal", command="pytest -q", expected_duration_s=30.0, call_id="c1"),
    ToolFinished("s1", 3.5, "terminal", 1.5, exit_status=1, queue_wait_s=0.2),
    SessionEnded("s1", 9.0),
    ToolCancelled("s1", 4.0),
    EngineTelemetry(1.0, free_blocks=10, total_blocks=100, pinned_blocks=5),
    CpuTelemetry(1.0, tools_in_flight=6, tool_workers=4, ema_queue_wait_s=0.5, tools_queued=2),
]


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: e.TYPE)
def test_round_trip(event):
    assert parse_event(event.to_dict()) == event


def test_every_type_has_a_sample():
    assert {e.TYPE for e in SAMPLES} | {"prefill_started", "turn_finished"} == set(EVENT_TYPES)


@pytest.mark.parametrize("data, field", [
    ({"type": "nope"}, "type"),
    ({"session_id": "s"}, "type"),
    ({"type": "tool_finished", "session_id": "s", "t": 1, "tool_name": "x"}, "tool_finished.duration_s"),
    ({"type": "tool_finished", "session_id": "s", "t": 1, "tool_name": "x", "duration_s": -2},
     "tool_finished.duration_s"),
    ({"type": "tool_started", "session_id": "s", "t": 1, "tool_name": ""}, "tool_started.tool_name"),
    ({"type": "tool_started", "session_id": 5, "t": 1, "tool_name": "x"}, "tool_started.session_id"),
    ({"type": "turn_submitted", "session_id": "s", "t": "now"}, "turn_submitted.t"),
    ({"type": "turn_submitted", "session_id": "s", "t": 1, "prompt_tokens": 1.5}, "turn_submitted.prompt_tokens"),
    ({"type": "turn_submitted", "session_id": "s", "t": float("nan")}, "turn_submitted.t"),
    ({"type": "engine_telemetry", "t": 0, "free_blocks": 90, "total_blocks": 100, "pinned_blocks": 20},
     "engine_telemetry.free_blocks"),
    ({"type": "session_ended", "session_id": "s", "t": True}, "session_ended.t"),
    ({"type": "cpu_telemetry", "t": 0, "tools_in_flight": 3, "tool_workers": 4, "tools_queued": -1},
     "cpu_telemetry.tools_queued"),
])
def test_invalid_event_names_the_field(data, field):
    with pytest.raises(EventError, match=field.replace(".", r"\.")):
        parse_event(data)


def test_unknown_fields_are_ignored():
    e = parse_event({"type": "session_ended", "session_id": "s", "t": 0, "extra": [1]})
    assert e == SessionEnded("s", 0.0)


def test_batch_is_all_or_nothing_and_names_the_index():
    good = SAMPLES[0].to_dict()
    assert parse_batch({"events": [good, good]}) == [SAMPLES[0], SAMPLES[0]]
    with pytest.raises(EventError, match=r"events\[1\]\.session_ended\.session_id"):
        parse_batch({"events": [good, {"type": "session_ended", "t": 0}]})
    with pytest.raises(EventError, match="'events' list"):
        parse_batch([good])


def test_telemetry_derived_values():
    assert EngineTelemetry(0, 25, 100).usage == pytest.approx(0.75)
    assert CpuTelemetry(0, 6, 4).backlog == pytest.approx(1.5)
