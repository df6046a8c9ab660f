"""mars-trace/1: reading, writing, and errors that name the line and the field."""
import json

import pytest

from mars_openhands.workload.trace import SessionTrace, ToolCall, TraceError, Turn, parse_trace, read_trace, write_trace

DOC_EXAMPLE = {
    "schema": "mars-trace/1", "session_id": "swe-0007", "arrival_s": 12.5,
    "source": "synthetic:swebench-like seed=3", "system_prompt_id": "openhands-sdk-cli-mode",
    "system_prompt_tokens": 4100,
    "turns": [
        {"input_tokens": 5900, "output_tokens": 140,
         "tool": {"name": "terminal", "command": "grep -rn clamp src", "duration_s": 0.31, "cpu_cores": 1.0}},
        {"input_tokens": 7050, "output_tokens": 95, "shared_prefix_tokens": 6040,
         "tool": {"name": "terminal", "command": "python -m pytest -q tests", "duration_s": 14.2, "cpu_cores": 1.0}},
        {"input_tokens": 9800, "output_tokens": 60, "tool": None},
    ]}


def test_reads_the_documented_example_and_round_trips(tmp_path):
    (s,) = parse_trace([json.dumps(DOC_EXAMPLE)])
    assert s.session_id == "swe-0007" and s.system_prompt_tokens == 4100 and len(s.turns) == 3
    assert s.turns[0].tool == ToolCall("terminal", 0.31, 1.0, "grep -rn clamp src")
    assert s.turns[2].tool is None
    path = tmp_path / "t.jsonl"
    write_trace(path, [s])
    assert read_trace(path) == [s]


def test_shared_prefix_defaults_to_previous_context():
    s = SessionTrace("a", 0.0, (Turn(100, 10), Turn(150, 5), Turn(300, 5, shared_prefix_tokens=40)))
    assert [s.shared_prefix(k) for k in range(3)] == [0, 110, 40]


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.pop("session_id"), "session.session_id: missing"),
    (lambda d: d.update(schema="mars-trace/0"), "schema"),
    (lambda d: d.update(turns=[]), "turns"),
    (lambda d: d["turns"][1].update(input_tokens="many"), r"turns\[1\]\.input_tokens"),
    (lambda d: d["turns"][0]["tool"].pop("duration_s"), r"turns\[0\]\.tool\.duration_s"),
    (lambda d: d.update(arrival_s=-1), "arrival_s"),
])
def test_malformed_line_names_line_and_field(mutate, message):
    bad = json.loads(json.dumps(DOC_EXAMPLE))
    mutate(bad)
    good = dict(DOC_EXAMPLE, session_id="other")
    with pytest.raises(TraceError, match=r"t\.jsonl:2: .*" + message):
        parse_trace([json.dumps(good), json.dumps(bad)], "t.jsonl")


def test_not_json_and_duplicates_and_empty():
    with pytest.raises(TraceError, match=r"x:1: not JSON"):
        parse_trace(["{oops"], "x")
    line = json.dumps(DOC_EXAMPLE)
    with pytest.raises(TraceError, match=r"x:3: session_id: duplicate"):
        parse_trace([line, "", line], "x")
    with pytest.raises(TraceError, match="no sessions"):
        parse_trace(["", "  "], "x")
