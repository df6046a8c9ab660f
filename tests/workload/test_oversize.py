"""The oversize rule (`workload/oversize.py`): condense, drop or refuse sessions over the limit."""
from __future__ import annotations

import pytest

from mars_openhands.workload.oversize import COMPACT_TO, OversizeError, call_limit, fit_sessions
from mars_openhands.workload.trace import SessionTrace, ToolCall, Turn

TOOL = ToolCall("tool", 1.0)


def session(sid: str, sizes: list[tuple[int, int]], shared: dict[int, int] | None = None,
            head: int = 0) -> SessionTrace:
    turns = tuple(Turn(i, o, TOOL if k + 1 < len(sizes) else None, (shared or {}).get(k))
                  for k, (i, o) in enumerate(sizes))
    return SessionTrace(sid, 0.0, turns, "sys" if head else None, head)


GROWING = session("g", [(400, 50), (800, 50), (1100, 50), (1300, 50), (1700, 50)], head=100)


def test_sessions_within_the_limit_are_unchanged():
    fitted = fit_sessions([GROWING], 2000)
    assert fitted.sessions == [GROWING] and not fitted.compactions and not fitted.dropped
    assert fitted.line() == "oversize: every turn fits 2,000 tokens"


def test_compact_condenses_to_half_the_limit_and_keeps_growing_from_there():
    fitted = fit_sessions([GROWING], 1000)
    (s,) = fitted.sessions
    target = int(1000 * COMPACT_TO)
    # turn 2 (1100 + 50) is over: condensed to `target` with the system prompt kept as its only
    # shared prefix; turn 3 carries the same drop; turn 4 reaches the limit again
    assert [(t.input_tokens, t.output_tokens) for t in s.turns] == [
        (400, 50), (800, 50), (target - 50, 50), (target - 50 + 200, 50), (target - 50, 50)]
    assert [t.shared_prefix_tokens for t in s.turns] == [None, None, 100, None, 100]
    assert all(t.input_tokens + t.output_tokens <= 1000 for t in s.turns)
    assert (fitted.compacted_sessions, fitted.compactions) == (1, 2)
    assert fitted.line() == "oversize: condensed 1 session(s) (2 condensations) to fit 1,000 tokens"


def test_a_turn_that_rewrote_its_context_starts_without_a_drop():
    s = session("r", [(900, 50), (1200, 50), (300, 50), (600, 50)], shared={2: 64})
    (out,) = fit_sessions([s], 1000).sessions
    assert [t.input_tokens for t in out.turns] == [900, 450, 300, 600]
    assert out.turns[2].shared_prefix_tokens == 64


def test_drop_leaves_out_sessions_over_the_limit_and_counts_them():
    small = session("s", [(100, 10)])
    fitted = fit_sessions([GROWING, small], 1000, "drop")
    assert fitted.sessions == [small] and fitted.dropped == ("g",)
    assert fitted.line() == "oversize: dropped 1 session(s) to fit 1,000 tokens"


def test_a_session_that_cannot_be_condensed_is_dropped_under_compact():
    huge_reply = session("h", [(100, 10), (200, 990)], head=50)
    fitted = fit_sessions([huge_reply, GROWING], 1000)
    assert [s.session_id for s in fitted.sessions] == ["g"] and fitted.uncompactable == 1
    assert "dropped 1 session(s), 1 too long even when condensed" in fitted.line()


def test_error_names_the_session_turn_and_sizes():
    with pytest.raises(OversizeError, match=r"session 'g' turn 4: 1,750 tokens \(prompt \+ reply\) do not fit "
                                            r"in 1,000"):
        fit_sessions([GROWING], 1000, "error")


def test_the_limit_is_the_model_length_or_the_kv_cache_whichever_is_smaller():
    assert call_limit(262_144, 100_000) == 100_000
    assert call_limit(2048, 31_104) == 2048
    assert call_limit(None, 31_104) == 31_104
