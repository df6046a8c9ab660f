"""`mars-openhands record` on hand-made persisted conversations: turns, tools, and clear errors.

(The end-to-end test records a real OpenHands run; these cover the shapes a real run rarely hits.)
"""
from __future__ import annotations

import json

import pytest

from mars_openhands.openhands.record import RecordError, main, record, record_conversation

pytestmark = pytest.mark.agent


def _conv(root, cid, events, usages):
    d = root / cid
    (d / "events").mkdir(parents=True)
    state = {"id": cid, "stats": {"usage_to_metrics": {"agent": {"token_usages": [
        {"response_id": rid, "prompt_tokens": p, "completion_tokens": c} for rid, p, c in usages]}}}}
    (d / "base_state.json").write_text(json.dumps(state))
    for i, ev in enumerate(events):
        (d / "events" / f"event-{i:05d}-x.json").write_text(json.dumps(ev))
    return d


def _action(t, rid, call, tool, **action):
    return {"kind": "ActionEvent", "source": "agent", "timestamp": t, "llm_response_id": rid,
            "tool_name": tool, "tool_call_id": call, "action": action}


def _obs(t, call):
    return {"kind": "ObservationEvent", "source": "environment", "timestamp": t, "tool_call_id": call}


def test_parallel_calls_become_one_turn_and_finish_ends(tmp_path):
    events = [
        {"kind": "SystemPromptEvent", "source": "agent", "timestamp": "2026-12-02T10:00:00"},
        _action("2026-12-02T10:00:01", "r0", "c0", "terminal", command="pytest -q"),
        _action("2026-12-02T10:00:01.100000", "r0", "c1", "file_editor", command="view", path="/a.py"),
        _obs("2026-12-02T10:00:03.500000", "c0"), _obs("2026-12-02T10:00:03.600000", "c1"),
        _action("2026-12-02T10:00:04", "r1", "c2", "finish", message="done"),
        _obs("2026-12-02T10:00:04.010000", "c2"),
    ]
    session, _ = record_conversation(_conv(tmp_path, "s1", events, [("r0", 5000, 120), ("r1", 6000, 0)]))
    assert len(session.turns) == 2
    first, last = session.turns
    assert (first.input_tokens, first.output_tokens) == (5000, 120)
    assert first.tool.name == "terminal" and first.tool.command == "pytest -q ; view /a.py"
    assert first.tool.duration_s == pytest.approx(2.6)  # first action to last observation
    assert last.tool is None and last.output_tokens == 1  # the schema's minimum


def test_arrivals_relative_to_earliest_and_cli_writes_trace(tmp_path):
    for cid, start in (("late", "2026-12-02T10:00:05"), ("early", "2026-12-02T10:00:00")):
        _conv(tmp_path / "convs", cid, [_action(start, "r", "c", "finish", message="x"), _obs(start, "c")],
              [("r", 100, 5)])
    sessions = record([tmp_path / "convs"])
    assert [(s.session_id, s.arrival_s) for s in sessions] == [("early", 0.0), ("late", 5.0)]
    out = tmp_path / "t.jsonl"
    assert main([str(tmp_path / "convs"), "-o", str(out)]) == 0
    assert [json.loads(line)["session_id"] for line in out.read_text().splitlines()] == ["early", "late"]


def test_errors_name_the_file_and_field(tmp_path, capsys):
    with pytest.raises(RecordError, match="no base_state.json"):
        record_conversation(tmp_path)
    d = _conv(tmp_path, "s", [_action("2026-12-02T10:00:01", "r9", "c", "finish")], [("r0", 1, 1)])
    with pytest.raises(RecordError, match=r"base_state.json: stats: no token usage for LLM response 'r9'"):
        record_conversation(d)
    bad = _conv(tmp_path, "t", [{"kind": "ActionEvent", "timestamp": "yesterday"}], [])
    with pytest.raises(RecordError, match=r"event-00000-x.json: timestamp"):
        record_conversation(bad)
    assert main([str(tmp_path / "nowhere"), "-o", str(tmp_path / "o.jsonl")]) == 2
    assert "no such directory" in capsys.readouterr().err
