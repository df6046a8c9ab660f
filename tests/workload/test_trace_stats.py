"""trace_stats on a hand-made trace whose statistics are known."""
from __future__ import annotations

from mars_openhands.workload.stats import trace_stats
from mars_openhands.workload.trace import SessionTrace, ToolCall, Turn


def test_stats_of_a_known_trace():
    a = SessionTrace("a", 0.0, (
        Turn(5000, 100, ToolCall("terminal", 0.2, command="grep -rn x .")),
        Turn(5600, 1500, ToolCall("terminal", 20.0, command="python -m pytest -q tests/t.py")),
        Turn(9000, 200, None)))
    b = SessionTrace("b", 10.0, (
        Turn(7000, 60, ToolCall("terminal", 100.0, command="python -m pytest -q tests")),
        Turn(6000, 80, None, shared_prefix_tokens=4000)))
    s = trace_stats([a, b])
    assert (s["sessions"], s["llm_calls"], s["mean_turns"]) == (2, 5, 2.5)
    assert (s["min_first_prompt"], s["max_first_prompt"]) == (5000, 7000)
    assert s["p50_deepest_prompt"] == 8000.0
    assert s["p50_growth"] == 2000.0          # 600 and 3400; the condensed turn is not growth
    assert s["condensations"] == 1
    assert s["share_tool_fast"] == s["share_tool_medium"] == s["share_tool_slow"] == 1 / 3
    assert s["tests_per_session"] == 1.0
    assert s["share_output_50_300"] == 0.8 and s["share_output_1k_2k"] == 0.2
    assert s["arrival_rate_sps"] == 0.1
