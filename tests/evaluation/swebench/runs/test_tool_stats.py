"""tool_stats --retime: a generated trace written again with the measured tool durations of each
command class, everything else (and the classes never measured) as it was."""
from __future__ import annotations

import pytest

from evaluation.swebench.runs import tool_stats
from mars_openhands.workload.trace import SessionTrace, ToolCall, Turn, read_trace, write_trace

pytestmark = pytest.mark.agent

CALLS = [("test", 5.0), ("test", 7.0), ("read", 0.01)]


def _session() -> SessionTrace:
    tools = [ToolCall("terminal", 120.0, 1.0, "python -m pytest -q tests"),
             ToolCall("terminal", 300.0, 2.0, "pip install -e ."),
             ToolCall("file_editor", 0.4, 0.2, "view src/a.py"), None]
    return SessionTrace("s", 3.0, tuple(Turn(1000 * (i + 1), 50, t) for i, t in enumerate(tools)), source="synthetic")


def test_measured_classes_are_redrawn_and_the_rest_is_kept():
    (out,), redrawn = tool_stats.retime([_session()], CALLS, seed=1)
    tests, pip, view, final = out.turns
    assert tests.tool.duration_s in (5.0, 7.0) and tests.tool.cpu_cores == 1.0
    assert pip.tool.duration_s == 300.0 and view.tool.duration_s == 0.01 and final.tool is None
    assert [t.input_tokens for t in out.turns] == [t.input_tokens for t in _session().turns]
    assert redrawn == {"test": 1, "read": 1} and out.source == "synthetic tools=measured"
    assert tool_stats.retime([_session()], CALLS, seed=1)[0] == [out]  # seeded


def test_cli_writes_the_retimed_trace_and_refuses_half_the_flags(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    measured = SessionTrace("m", 0.0, (Turn(10, 1, ToolCall("terminal", 9.0, 1.0, "pytest x")),))
    write_trace(run / "trace.jsonl", [measured])
    write_trace(tmp_path / "gen.jsonl", [_session()])
    assert tool_stats.main([str(run), "--retime", str(tmp_path / "gen.jsonl"), "--out", str(tmp_path / "o.jsonl")]) == 0
    assert "1 of 3 tool calls redrawn from the measurements (test 1)" in capsys.readouterr().out
    (s,) = read_trace(tmp_path / "o.jsonl")
    assert s.turns[0].tool.duration_s == 9.0 and s.turns[1].tool.duration_s == 300.0
    assert tool_stats.main([str(run), "--retime", str(tmp_path / "gen.jsonl")]) == 2
    assert "go together" in capsys.readouterr().err
    assert tool_stats.main([str(run), "--retime", str(tmp_path / "no.jsonl"), "--out", str(tmp_path / "x")]) == 2
