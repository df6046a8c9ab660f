"""Statistics of a trace, in the terms the generator's calibration targets use (to check a generator or a
recorded trace against real agent runs)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mars_openhands.workload.synthetic import FAST_MAX_S, SLOW_MIN_S
from mars_openhands.workload.trace import SessionTrace

_TEST_MARKERS = ("pytest", "tox", "unittest", "manage.py test")


def _q(xs: Sequence[float] | np.ndarray, *ps: float) -> list[float]:
    return [float(v) for v in np.percentile(np.asarray(xs, dtype=float), ps)]


def trace_stats(sessions: Sequence[SessionTrace]) -> dict[str, float]:
    """Turns, prompt sizes, context growth, outputs and tool durations of `sessions`."""
    turns = [len(s.turns) for s in sessions]
    first = [s.turns[0].input_tokens for s in sessions]
    deepest = [max(t.input_tokens for t in s.turns) for s in sessions]
    outputs = [t.output_tokens for s in sessions for t in s.turns]
    # A condensation shrinks the prompt; every other turn grows it (append-only, or after a reply
    # whose hidden reasoning was dropped).
    steps = [(s.turns[k - 1].input_tokens, s.turns[k].input_tokens)
             for s in sessions for k in range(1, len(s.turns))]
    growth = [b - a for a, b in steps if b >= a]
    tools = [t.tool for s in sessions for t in s.turns if t.tool is not None]
    durations = np.array([t.duration_s for t in tools])
    tests = sum(1 for t in tools if t.command and any(m in t.command for m in _TEST_MARKERS))
    arrivals = sorted(s.arrival_s for s in sessions)
    span = arrivals[-1] - arrivals[0]
    out: dict[str, float] = {"sessions": len(sessions), "llm_calls": sum(turns),
                             "mean_turns": float(np.mean(turns))}
    out["p50_turns"], out["p95_turns"] = _q(turns, 50, 95)
    out["p50_first_prompt"], out["min_first_prompt"], out["max_first_prompt"] = (
        *_q(first, 50), float(min(first)), float(max(first)))
    out["p50_deepest_prompt"], out["p95_deepest_prompt"], out["p99_deepest_prompt"] = _q(deepest, 50, 95, 99)
    out["p50_growth"], out["p99_growth"] = _q(growth, 50, 99) if growth else (0.0, 0.0)
    out["p50_output"] = _q(outputs, 50)[0]
    out["share_output_50_300"] = float(np.mean([(50 <= o <= 300) for o in outputs]))
    out["share_output_1k_2k"] = float(np.mean([(1000 <= o <= 2000) for o in outputs]))
    if len(durations):
        out["p50_tool_s"], out["p90_tool_s"], out["p99_tool_s"] = _q(durations, 50, 90, 99)
        out["mean_tool_s"] = float(durations.mean())
        out["share_tool_fast"] = float(np.mean(durations <= FAST_MAX_S))
        out["share_tool_medium"] = float(np.mean((durations > FAST_MAX_S) & (durations <= SLOW_MIN_S)))
        out["share_tool_slow"] = float(np.mean(durations > SLOW_MIN_S))
    out["tests_per_session"] = tests / len(sessions)
    out["condensations"] = sum(1 for a, b in steps if b < a)
    out["arrival_rate_sps"] = (len(sessions) - 1) / span if span > 0 else float("inf")
    return out
