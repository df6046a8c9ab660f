"""The workload-family knobs of the synthetic generator do what their docstrings say, and the named
families (workload/families.py) are built from them."""
from __future__ import annotations

import pytest

from mars_openhands.workload.families import FAMILIES, MIX, family_names, family_sessions
from mars_openhands.workload.synthetic import SYSTEM_PROMPT_TOKENS, SyntheticConfig, generate
from mars_openhands.workload.trace import session_to_dict


def sessions(n: int = 200, **knobs):
    return generate(SyntheticConfig(n, seed=3, **knobs))


def test_knobs_at_their_defaults_change_nothing():
    plain = sessions(40)
    explicit = sessions(40, long_prompt_share=0.0, condense_keep=0.4, heavy_cores_scale=1.0,
                        obs_scale=1.0, output_scale=1.0, reasoning_tokens=0.0)
    assert [session_to_dict(s) for s in plain] == [session_to_dict(s) for s in explicit]


def test_long_first_prompts_hit_the_share_and_range_and_change_only_the_prompt():
    roomy = 500_000           # no condensation: its summary draws would shift later sessions
    base, long = sessions(max_context_tokens=roomy), sessions(max_context_tokens=roomy, long_prompt_share=0.3)
    first = [s.turns[0].input_tokens for s in long]
    big = [t for t in first if t > 8000]
    assert 0.22 <= len(big) / len(first) <= 0.38
    assert all(30_000 <= t <= 60_000 for t in big)
    assert all(t <= 8000 for t in first if t not in big)
    # the knob draws from its own stream: turn counts and tool calls are unchanged
    assert [len(s.turns) for s in base] == [len(s.turns) for s in long]
    assert [[t.tool for t in s.turns] for s in base] == [[t.tool for t in s.turns] for s in long]


def test_condensation_keeps_context_below_the_threshold_and_cuts_it_to_a_few_k():
    limit, keep = 40_000, 0.03
    condensed = 0
    for s in sessions(max_context_tokens=limit, condense_keep=keep):
        head = s.turns[0].input_tokens
        for prev, t in zip(s.turns, s.turns[1:]):
            assert t.input_tokens <= limit
            if t.input_tokens < prev.input_tokens:
                condensed += 1
                assert t.shared_prefix_tokens == head
                assert t.input_tokens <= head + 2000 + keep * limit   # summary <= 2k + recent share
    assert condensed > 30


def test_bursty_arrivals_come_in_groups():
    arrivals = [s.arrival_s for s in family_sessions("bursty-cpu", 120, rate=0.05, seed=1)]
    assert len(set(arrivals)) == 3
    assert all(arrivals[i] == arrivals[i - i % 40] for i in range(120))


def test_heavy_cores_scale_multiplies_test_and_build_cores_only():
    base, heavy = sessions(30), sessions(30, heavy_cores_scale=3.0)
    for a, b in zip(base, heavy):
        for ta, tb in zip(a.turns, b.turns):
            if ta.tool is None:
                continue
            slowish = ta.tool.duration_s > 1.0 and ta.tool.command.startswith(("python", "pip"))
            assert tb.tool.cpu_cores == (3.0 * ta.tool.cpu_cores if slowish else ta.tool.cpu_cores)


def test_obs_and_output_scale_shrink_what_they_name():
    base, short = sessions(60), sessions(60, obs_scale=0.3, output_scale=0.5)

    def out(ss):
        return sum(t.output_tokens for s in ss for t in s.turns[1:])

    def grow(ss):
        return sum(b.input_tokens - a.input_tokens - a.output_tokens
                   for s in ss for a, b in zip(s.turns, s.turns[1:]) if b.input_tokens > a.input_tokens)

    assert 0.45 <= out(short) / out(base) <= 0.55
    assert grow(short) / grow(base) < 0.4


def test_reasoning_is_decoded_then_dropped_from_the_next_prompt():
    base, think = sessions(60), sessions(60, reasoning_tokens=800.0)
    extra = [tb.output_tokens - ta.output_tokens for a, b in zip(base, think) for ta, tb in zip(a.turns, b.turns)]
    assert all(e >= 80 for e in extra) and 600 <= sorted(extra)[len(extra) // 2] <= 1000
    for s in think:
        for prev, t in zip(s.turns, s.turns[1:]):
            if t.input_tokens > prev.input_tokens:      # not a condensation
                assert t.shared_prefix_tokens == prev.input_tokens
    # the prompts themselves are the ones without reasoning
    assert [[t.input_tokens for t in s.turns] for s in base] == [[t.input_tokens for t in s.turns] for s in think]


@pytest.mark.parametrize("knobs", [dict(long_prompt_share=1.5), dict(long_prompt_tokens=(1000, 2000)),
                                   dict(condense_keep=0.9), dict(heavy_cores_scale=0.0),
                                   dict(obs_scale=-1.0), dict(output_scale=0.0), dict(reasoning_tokens=-5.0)])
def test_bad_family_knobs_name_the_knob(knobs):
    with pytest.raises(ValueError, match=next(iter(knobs))):
        SyntheticConfig(5, **knobs)


def test_long_prompts_must_fit_under_the_condensation_threshold():
    with pytest.raises(ValueError, match="long_prompt_tokens"):
        SyntheticConfig(5, long_prompt_share=0.3, max_context_tokens=50_000)


def test_swe_family_is_the_default_generator_and_others_are_named_by_family():
    assert family_sessions("swe", 20, rate=0.2, seed=4) == generate(SyntheticConfig(20, rate=0.2, seed=4))
    for name in FAMILIES:
        ss = family_sessions(name, 10, rate=0.2, seed=4)
        assert all(s.session_id.startswith(f"{name}-") for s in ss)
        assert SYSTEM_PROMPT_TOKENS < ss[0].turns[0].input_tokens


def test_mix_draws_every_family_in_equal_shares_on_one_poisson_process():
    ss = family_sessions("mix", 50, rate=0.1, seed=2)
    prefixes = [s.session_id.rsplit("-", 1)[0] for s in ss]
    assert sorted(set(prefixes)) == sorted(MIX) and all(prefixes.count(f) == 10 for f in MIX)
    assert len({s.session_id for s in ss}) == 50
    t = [s.arrival_s for s in ss]
    assert t == sorted(t) and len(set(t)) == 50
    assert prefixes != sorted(prefixes)                  # interleaved, not one family after another


def test_family_contents_do_not_depend_on_the_rate():
    for name in family_names():
        a, b = family_sessions(name, 10, rate=0.1, seed=1), family_sessions(name, 10, rate=1.0, seed=1)
        assert [s.turns for s in a] == [s.turns for s in b]


def test_unknown_family_is_named():
    with pytest.raises(ValueError, match="'bogus'"):
        family_sessions("bogus", 5, rate=1.0, seed=0)
