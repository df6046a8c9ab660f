"""Engine cost fits and ideal latency: known costs are recovered; warm hits follow vLLM's block rule."""
import asyncio
import dataclasses

import numpy as np
import pytest

from mars_openhands.replay.engine import EngineClient
from mars_openhands.replay.engine_costs import (
    MAX_FIT_ERROR,
    EngineCosts,
    ProbePlan,
    Samples,
    calibrate,
    fit_errors,
    fit_problems,
    nonneg_lstsq,
)
from mars_openhands.workload.prompts import TokenSpace, TurnShape

TRUE = EngineCosts(block_size=16, prefill_a_s=0.01, prefill_per_token_s=2e-4, prefill_per_token_ctx_s=1e-8,
                   decode_step_s=0.004, decode_per_seq_s=0.001, decode_per_ctx_token_s=2e-7)


def test_fit_recovers_known_costs():
    rng = np.random.default_rng(0)
    s = Samples()
    for n in (16, 128, 512, 1024):
        for ctx in (0, 256, 2048):
            s.prefill.append((n, ctx, TRUE.prefill_s(n, ctx) * (1 + rng.normal(0, 0.01))))
    for k in (1, 2, 4, 8):
        for ctx in (64, 1024):
            s.decode.append((k, k * ctx, TRUE.decode_step_at(k, k * ctx) * (1 + rng.normal(0, 0.01))))
    fit = s.fit(16)
    assert fit.prefill_per_token_s == pytest.approx(2e-4, rel=0.1)
    assert fit.decode_per_seq_s == pytest.approx(1e-3, rel=0.15)
    assert fit.prefill_s(700, 900) == pytest.approx(TRUE.prefill_s(700, 900), rel=0.05)


def test_nonneg_lstsq_never_returns_negative_coefficients():
    x = np.array([[1, 1], [1, 2], [1, 3]], dtype=float)
    y = np.array([3.0, 2.0, 1.0])        # unconstrained slope would be -1
    coef = nonneg_lstsq(x, y)
    assert (coef >= 0).all() and coef[1] == 0 and coef[0] == pytest.approx(2.0)


def test_fit_needs_enough_samples():
    with pytest.raises(ValueError, match="too few"):
        Samples(prefill=[(1, 0, 0.1)], decode=[(1, 1, 0.1)]).fit(16)


@pytest.mark.parametrize("prompt, reusable, hit", [(100, 72, 64), (64, 64, 48), (100, 0, 0), (40, 200, 32)])
def test_warm_hit_counts_full_blocks_and_never_the_last_token(prompt, reusable, hit):
    assert TRUE.warm_hit(TurnShape(prompt, reusable, 8)) == hit


def test_ideal_turn_and_session():
    shape = TurnShape(prompt_tokens=100, reusable_tokens=72, output_tokens=8)
    expect = TRUE.prefill_s(36, 64) + 7 * TRUE.decode_step_at(1, 104)
    assert TRUE.turn_s(shape) == pytest.approx(expect)
    assert TRUE.session_ideal_s([shape, shape], 2.5) == pytest.approx(2 * expect + 2.5)


def test_calibrate_runs_the_planned_probes_against_an_engine(fake_engine):
    plan = ProbePlan.cover(block_size=16, max_new=64, max_ctx=64, max_len=4096, reps=1)
    ticks = []

    async def main():
        engine = EngineClient(fake_engine.url, "fake")
        try:
            return await calibrate(engine, TokenSpace.from_vocab(300, {0}), plan, progress=lambda: ticks.append(1))
        finally:
            await engine.aclose()
    s = asyncio.run(main())
    assert len(ticks) == plan.count == len(s.prefill) + len(s.decode)
    # the warmed prefix was served from the (fake) cache: prefill samples carry the reported hit
    assert any(ctx > 0 for _, ctx, _ in s.prefill)
    assert {k for k, _, _ in s.decode} == {1, 2, 4, 8}
    ended = [e for e in fake_engine.events if e["type"] == "session_ended"]
    assert ended and all(e["reason"] == "calibration" for e in ended)
    assert s.fit(16).decode_step_at(1, 10) > 0


@pytest.mark.parametrize("max_len", [512, 1408, 40000])
def test_probe_plan_stays_within_the_model_length(max_len):
    plan = ProbePlan.cover(128, max_new=3000, max_ctx=30000, max_len=max_len)
    longest = max(plan.ctx_sizes) + max(max(plan.new_sizes), 128 + 2 * plan.decode_len)
    assert longest < max_len
    assert max(plan.new_sizes) <= 2048 and max(plan.ctx_sizes) <= 8192
    assert plan.decode_len == min(128, max_len // 16)


def test_probe_plan_refuses_a_model_length_without_room():
    with pytest.raises(ValueError, match="no room"):
        ProbePlan.cover(128, max_new=100, max_ctx=100, max_len=200)


def test_a_decode_probe_lost_in_noise_is_counted_and_not_fitted():
    s = Samples()
    s.add_decode(2, 512, 0.004)
    s.add_decode(4, 1024, None)          # the long run did not outlast the short one
    assert s.decode == [(2, 512, 0.004)] and s.decode_failed == 1


def test_batches_are_probed_after_no_context_and_after_the_longest(fake_engine):
    plan = ProbePlan.cover(block_size=16, max_new=64, max_ctx=64, max_len=4096, reps=1)

    async def main():
        engine = EngineClient(fake_engine.url, "fake")
        try:
            return await calibrate(engine, TokenSpace.from_vocab(300, {0}), plan)
        finally:
            await engine.aclose()
    s = asyncio.run(main())
    per_batch = {k: sorted(c for kk, c, _ in s.decode if kk == k) for k in (2, 4, 8)}
    dl = plan.decode_len
    for k, sums in per_batch.items():    # per sequence and per context token apart
        assert sums == [k * (16 + dl + dl // 2), k * (max(plan.ctx_sizes) + 16 + dl + dl // 2)]


def _true_samples(reps: int = 3, noise=None) -> Samples:
    """Probes of `TRUE` over a plan's shapes, `reps` times each; `noise(rep, i)` multiplies a time."""
    s = Samples()
    noise = noise or (lambda rep, i: 1.0)
    for rep in range(reps):
        for i, (n, ctx) in enumerate((n, ctx) for n in (16, 128, 512, 1024) for ctx in (0, 256, 2048)):
            s.prefill.append((n, ctx, TRUE.prefill_s(n, ctx) * noise(rep, i)))
        for i, (k, ctx) in enumerate((k, ctx) for k in (1, 2, 4, 8) for ctx in (64, 1024)):
            s.decode.append((k, k * ctx, TRUE.decode_step_at(k, k * ctx) * noise(rep, 100 + i)))
    return s


def test_the_fit_is_made_on_medians_so_one_slowed_probe_per_shape_does_not_bend_it():
    # each shape: one of its three reps ran 10x slow (the host's other work); a least-squares fit on
    # every sample would follow them, the fit on the medians does not
    slowed = _true_samples(noise=lambda rep, i: 10.0 if rep == i % 3 else 1.0)
    fit = slowed.fit(16)
    assert fit.prefill_per_token_s == pytest.approx(TRUE.prefill_per_token_s, rel=1e-6)
    assert fit.decode_step_at(4, 4096) == pytest.approx(TRUE.decode_step_at(4, 4096), rel=1e-6)
    assert fit_problems(slowed, fit) == []
    prefill, decode = slowed.medians()
    assert len(prefill) == 12 and all(len(p.times_s) == 3 for p in prefill) and len(decode) == 8


def test_a_prefill_that_costs_nothing_per_token_is_refused():
    flat = Samples(prefill=[(n, ctx, 0.02) for n in (16, 64, 256) for ctx in (0, 128)],
                   decode=[(k, k * 100, 0.004 + 0.001 * k) for k in (1, 2, 4, 8)])
    costs = flat.fit(16)
    assert costs.prefill_per_token_s == costs.prefill_per_token_ctx_s == 0.0
    (problem,) = fit_problems(flat, costs)
    assert "prefill costs nothing per token (b = c = 0)" in problem


def test_a_decode_step_that_costs_nothing_and_a_bad_coefficient_are_refused():
    s = _true_samples(reps=1)
    free = dataclasses.replace(TRUE, decode_step_s=0.0, decode_per_seq_s=0.0)
    assert any("decode step costs nothing" in p for p in fit_problems(s, free))
    nan = dataclasses.replace(TRUE, prefill_a_s=float("nan"))
    assert any("prefill_a_s = nan" in p for p in fit_problems(s, nan))


def test_a_fit_too_far_from_its_medians_is_refused_past_the_bound():
    rng = np.random.default_rng(1)
    wild = _true_samples(reps=1, noise=lambda rep, i: float(rng.choice([0.2, 1.0, 3.0])))
    costs = wild.fit(16)
    pre, dec = fit_errors(wild, costs)
    assert max(pre.rms, dec.rms) > MAX_FIT_ERROR
    problems = fit_problems(wild, costs)
    assert problems and all("past the bound of 50%" in p for p in problems)
    assert fit_problems(wild, costs, max_error=100.0) == []
