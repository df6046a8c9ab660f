"""The synthetic generator reproduces its calibration targets and is deterministic per seed."""
from __future__ import annotations

import math

import pytest

from mars_openhands.workload.stats import trace_stats
from mars_openhands.workload.synthetic import (
    SYSTEM_PROMPT_ID,
    SyntheticConfig,
    arrival_times,
    generate,
    synthetic_sessions,
)
from mars_openhands.workload.trace import read_trace, session_to_dict, write_trace


@pytest.fixture(scope="module")
def big():
    return synthetic_sessions(2000, seed=11)


@pytest.fixture(scope="module")
def stats(big):
    return trace_stats(big)


def near(value: float, target: float, rel: float) -> bool:
    return abs(value - target) <= rel * target


def test_turns_per_session_match_swebench_agents(stats):
    assert near(stats["p50_turns"], 36, 0.10)
    assert near(stats["p95_turns"], 87, 0.12)
    assert near(stats["mean_turns"], 41, 0.08)


def test_initial_prompt_is_system_prompt_plus_task_4k_to_8k(big, stats):
    assert 4000 <= stats["min_first_prompt"] and stats["max_first_prompt"] <= 8000
    assert {s.system_prompt_id for s in big} == {SYSTEM_PROMPT_ID}
    assert all(s.turns[0].input_tokens > s.system_prompt_tokens for s in big)


def test_deepest_prompt_quantiles(stats):
    assert near(stats["p50_deepest_prompt"], 24_000, 0.12)
    assert near(stats["p95_deepest_prompt"], 69_000, 0.15)
    assert near(stats["p99_deepest_prompt"], 90_000, 0.10)


def test_context_growth_median_few_hundred_with_heavy_tail(big, stats):
    assert 150 <= stats["p50_growth"] <= 1500
    growth = [s.turns[k].input_tokens - s.turns[k - 1].input_tokens
              for s in big for k in range(1, len(s.turns)) if s.turns[k].shared_prefix_tokens is None]
    assert sum(g >= 5000 for g in growth) / len(growth) > 0.002
    assert max(growth) <= 22_000


def test_outputs_mostly_short_with_some_long(stats):
    assert stats["share_output_50_300"] >= 0.75
    assert 0.02 <= stats["share_output_1k_2k"] <= 0.12


def test_tool_durations_match_tracelab_quantiles_and_classes(stats):
    assert near(stats["p50_tool_s"], 0.3, 0.2)
    assert near(stats["p90_tool_s"], 13.6, 0.2)
    assert near(stats["p99_tool_s"], 216, 0.25)
    assert 8 <= stats["mean_tool_s"] <= 20
    assert 0.70 <= stats["share_tool_fast"] <= 0.80
    assert 0.15 <= stats["share_tool_medium"] <= 0.25
    assert 0.02 <= stats["share_tool_slow"] <= 0.06


def test_tests_run_about_nine_times_per_task(stats):
    assert near(stats["tests_per_session"], 8.8, 0.1)


def test_commands_are_consistent_with_durations(big):
    for s in big[:300]:
        for t in s.turns:
            if t.tool is None:
                continue
            assert t.tool.name in {"terminal", "file_editor"} and t.tool.command and t.tool.cpu_cores > 0
            c = t.tool.command
            if c.startswith(("ls ", "grep ", "cat ", "view ", "str_replace ", "git ")):
                assert t.tool.duration_s <= 1.0, c
            if c.endswith(("pytest -q tests", "tests/")) or c.startswith("pip install"):
                assert t.tool.duration_s >= 30.0, c
    assert all(s.turns[-1].tool is None and all(t.tool for t in s.turns[:-1]) for s in big)


def test_context_is_append_only_until_condensed_below_max(big):
    cfg = SyntheticConfig(1)
    condensed = 0
    for s in big:
        for k in range(1, len(s.turns)):
            prev, t = s.turns[k - 1], s.turns[k]
            assert t.input_tokens <= cfg.max_context_tokens
            if t.shared_prefix_tokens is None:
                assert t.input_tokens > prev.input_tokens + prev.output_tokens
            else:
                condensed += 1
                assert t.shared_prefix_tokens == s.turns[0].input_tokens
                assert t.input_tokens < prev.input_tokens + prev.output_tokens
    assert condensed > 0


def test_same_seed_same_trace_other_seed_differs():
    a = [session_to_dict(s) for s in synthetic_sessions(30, seed=5)]
    b = [session_to_dict(s) for s in synthetic_sessions(30, seed=5)]
    c = [session_to_dict(s) for s in synthetic_sessions(30, seed=6)]
    assert a == b and a != c


def test_rate_changes_arrivals_only():
    slow = synthetic_sessions(40, seed=2, rate=0.1)
    fast = synthetic_sessions(40, seed=2, rate=1.0)
    assert [s.turns for s in slow] == [s.turns for s in fast]
    assert slow[-1].arrival_s > 3 * fast[-1].arrival_s


@pytest.mark.parametrize("arrival", ["poisson", "fixed", "burst"])
def test_arrival_processes_keep_the_mean_rate(arrival):
    t = arrival_times(SyntheticConfig(4000, rate=0.5, seed=3, arrival=arrival, burst_size=10))
    assert t[0] == 0.0 and t == sorted(t)
    assert near((len(t) - 1) / t[-1], 0.5, 0.1)
    gaps = [b - a for a, b in zip(t, t[1:])]
    if arrival == "fixed":
        assert max(gaps) - min(gaps) < 1e-6
    elif arrival == "poisson":
        assert near(sum(g > 2.0 for g in gaps) / len(gaps), math.exp(-1.0), 0.1)   # P(gap > mean)
    else:
        assert len(set(t)) == 400 and all(t[i] == t[i - i % 10] for i in range(len(t)))


def test_turns_scale_and_context_scale():
    base = trace_stats(synthetic_sessions(400, seed=4))
    short = trace_stats(synthetic_sessions(400, seed=4, turns_scale=0.25))
    small = synthetic_sessions(400, seed=4, context_scale=0.25)
    assert near(short["p50_turns"], 9, 0.2) and short["mean_turns"] < base["mean_turns"] / 3
    assert trace_stats(small)["p50_deepest_prompt"] < base["p50_deepest_prompt"] / 3
    assert all(s.system_prompt_tokens == 1025 for s in small)


def test_tool_mix_and_time_scale():
    slowmix = trace_stats(synthetic_sessions(300, seed=4, tool_mix=(0.5, 0.3, 0.2)))
    assert 0.15 <= slowmix["share_tool_slow"] <= 0.25
    a = synthetic_sessions(50, seed=4)
    b = synthetic_sessions(50, seed=4, tool_time_scale=2.0)
    da = [t.tool.duration_s for s in a for t in s.turns if t.tool]
    db = [t.tool.duration_s for s in b for t in s.turns if t.tool]
    assert all(abs(y - 2 * x) <= 0.002 for x, y in zip(da, db))


@pytest.mark.parametrize("knobs", [dict(rate=0.0), dict(arrival="zipf"), dict(turns_scale=-1.0),
                                   dict(tool_mix=(1.0, 0.0)), dict(context_scale=0.0)])
def test_bad_knobs_name_the_knob(knobs):
    name = next(iter(knobs))
    with pytest.raises(ValueError, match=name):
        SyntheticConfig(5, **knobs)


def test_round_trips_through_the_trace_format(tmp_path):
    sessions = generate(SyntheticConfig(20, seed=9, arrival="burst", burst_size=4))
    path = tmp_path / "t.jsonl"
    write_trace(path, sessions)
    assert read_trace(path) == sessions
