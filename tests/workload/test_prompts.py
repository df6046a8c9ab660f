"""Prompt construction: append-only growth with the engine's own tokens, rewritten history, sharing."""
import json

import pytest

from mars_openhands.workload.prompts import (
    ModelDirError,
    SessionPrompts,
    TokenSpace,
    plan_shapes,
    replayed_session,
    scaled,
)
from mars_openhands.workload.trace import SessionTrace, ToolCall, Turn

SPACE = TokenSpace.from_vocab(300, exclude={0, 1, 2})


def _session(sid="s1", turns=None, sys_id="sys", sys_tokens=40):
    turns = turns or (Turn(100, 10, ToolCall("terminal", 0.1)), Turn(130, 5, ToolCall("terminal", 0.1)),
                      Turn(160, 8))
    return SessionTrace(sid, 0.0, tuple(turns), sys_id, sys_tokens)


def _generated(n, base=200):
    return [base + i for i in range(n)]


def test_each_prompt_extends_previous_prompt_with_the_generated_tokens():
    sp = SessionPrompts(_session(), SPACE)
    p0, s0 = sp.prompt(0)
    assert len(p0) == 100 and s0.reusable_tokens == 40 and s0.output_tokens == 10
    gen0 = _generated(10)
    sp.record(0, gen0)
    p1, s1 = sp.prompt(1)
    assert p1[:110] == p0 + gen0                  # what the engine actually produced, not what the trace said
    assert len(p1) == 130 and s1.reusable_tokens == 110
    sp.record(1, _generated(5, 250))
    p2, s2 = sp.prompt(2)
    assert p2[:135] == p1 + _generated(5, 250) and len(p2) == 160 and s2.reusable_tokens == 135


def test_rewritten_history_keeps_only_shared_prefix_tokens():
    turns = (Turn(100, 10, ToolCall("t", 0.1)), Turn(90, 5, ToolCall("t", 0.1), shared_prefix_tokens=60))
    sp = SessionPrompts(_session(turns=turns), SPACE)
    p0, _ = sp.prompt(0)
    sp.record(0, _generated(10))
    p1, s1 = sp.prompt(1)
    assert len(p1) == 90 and s1.reusable_tokens == 60
    assert p1[:60] == p0[:60]
    assert p1[60:] != (p0 + _generated(10))[60:90]     # the rest is new (condensed history)


def test_system_prompt_shared_across_sessions_with_the_same_id_only():
    a, _ = SessionPrompts(_session("a", sys_id="sys", sys_tokens=40), SPACE).prompt(0)
    b, _ = SessionPrompts(_session("b", sys_id="sys", sys_tokens=40), SPACE).prompt(0)
    c, sc = SessionPrompts(_session("c", sys_id="other", sys_tokens=40), SPACE).prompt(0)
    d, sd = SessionPrompts(_session("d", sys_id=None, sys_tokens=0), SPACE).prompt(0)
    assert a[:40] == b[:40] and a[40:] != b[40:]
    assert c[:40] != a[:40] and sc.reusable_tokens == 40
    assert d[:40] != a[:40] and sd.reusable_tokens == 0


def test_prompts_are_deterministic_and_avoid_special_tokens():
    p, _ = SessionPrompts(_session(), SPACE).prompt(0)
    q, _ = SessionPrompts(_session(), SPACE).prompt(0)
    assert p == q
    assert all(3 <= i < 300 for i in p)
    assert SPACE.draw("k", 50)[:20] == SPACE.draw("k", 20)


def test_token_scale_shrinks_every_count():
    sp = SessionPrompts(_session(), SPACE, scale=0.5)
    p0, s0 = sp.prompt(0)
    assert (len(p0), s0.reusable_tokens, s0.output_tokens) == (50, 20, 5)
    sp.record(0, _generated(5))
    p1, s1 = sp.prompt(1)
    assert len(p1) == 55 + scaled(130 - 110, 0.5) and s1.reusable_tokens == 55


def test_turns_must_be_built_in_order():
    sp = SessionPrompts(_session(), SPACE)
    with pytest.raises(ValueError, match="turn 1"):
        sp.prompt(1)
    sp.prompt(0)
    with pytest.raises(ValueError, match="record for turn 1"):
        sp.record(1, [])


def test_plan_shapes_matches_the_replayed_lengths():
    shapes = plan_shapes(_session(), SPACE, 1.0)
    assert [(s.prompt_tokens, s.reusable_tokens, s.output_tokens) for s in shapes] == \
        [(100, 40, 10), (130, 110, 5), (160, 135, 8)]


def test_token_space_from_model_dir_excludes_added_tokens(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 10}))
    (tmp_path / "tokenizer.json").write_text(json.dumps({"added_tokens": [{"id": 0}, {"id": 9}]}))
    assert TokenSpace.from_model_dir(tmp_path).ids.tolist() == list(range(1, 9))


def test_token_space_errors_name_the_problem(tmp_path):
    with pytest.raises(ModelDirError, match="config.json: missing"):
        TokenSpace.from_model_dir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(ModelDirError, match="vocab_size"):
        TokenSpace.from_model_dir(tmp_path)


def test_replayed_session_is_what_the_engine_was_sent():
    s = _session()
    shapes = plan_shapes(s, SPACE, 0.5)
    r = replayed_session(s, shapes, tool_time_scale=0.1)
    assert [(t.input_tokens, t.output_tokens) for t in r.turns] == [(x.prompt_tokens, x.output_tokens) for x in shapes]
    assert r.system_prompt_tokens == 20 and r.turns[0].shared_prefix_tokens is None
    assert [r.shared_prefix(k) for k in (1, 2)] == [shapes[1].reusable_tokens, shapes[2].reusable_tokens]
    assert r.turns[0].tool.duration_s == pytest.approx(0.01) and r.turns[2].tool is None
