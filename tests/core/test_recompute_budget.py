"""MARS' recompute budget: the measured share of engine time spent computing tokens again decides
whether sessions share a small cache by preemption (W_min of them, whatever their footprints) or
the cache is the bottleneck (admit what fits at once, pause the cheapest, price an idle engine)."""
from __future__ import annotations

from mars_openhands.core import EngineShape, PolicyConfig, Request, build_policy
from mars_openhands.core.admission import AimdAdmission
from mars_openhands.core.aimd_config import AimdConfig
from mars_openhands.core.context import PolicyContext
from mars_openhands.core.model import CpuState, KVState, Session


def ctx_with(total: int = 1000) -> PolicyContext:
    return PolicyContext(KVState(total, total, 16), CpuState(8, 0, 0.0))


def admitted(a: AimdAdmission, ctx: PolicyContext, tokens: dict[str, int], engaged: bool) -> dict[str, Session]:
    """Sessions admitted in the order given, each with `tokens` of context: a call of each in the
    engine (`engaged`), or each just gone to a tool."""
    out = {}
    for i, (sid, n) in enumerate(tokens.items()):
        s = Session(sid, 0.0, n, prompt_tokens=n, context_tokens=n, turns=2 if engaged else 1, turns_finished=1,
                    admitted=True, admitted_s=float(i), holds_slot=True, last_turn_finished_s=0.0)
        ctx.sessions[sid] = out[sid] = s
        a.working_set.add(s, ctx)
    return out


def run_ticks(a: AimdAdmission, ctx: PolicyContext, seconds: float, recomputing: bool) -> None:
    """Tick for `seconds`; `recomputing`: the engine spends all of it prefilling tokens again."""
    for _ in range(round(seconds / a.interval_s)):
        if recomputing:
            ctx.recomputed_tokens += round(ctx.prefill_tps * a.interval_s)
        a.tick(ctx)


def test_a_finished_call_counts_the_tokens_it_was_served_beyond_its_new_ones():
    p = build_policy("mars", EngineShape(total_blocks=1000, block_size=16, tool_workers=2), PolicyConfig())

    def call(k: int, prompt: int, served_prompt: int, now: float) -> None:
        req = Request(f"s#{k}", "s", now, prompt, turn_index=k)
        p.on_request_arrival(req, now)
        p.on_step([(req, served_prompt)], [], now)        # the prefill (it samples the first token)
        for _ in range(99):                               # 99 decode steps
            p.on_step([(req, 1)], [], now)
        req.computed_tokens, req.output_tokens = prompt, 100
        p.on_request_finished(req, 0, now + 1.0)

    call(0, 1000, 1000, 0.0)                  # a first call: all of it is new
    assert p.ctx.recomputed_tokens == 0
    call(1, 1300, 200, 2.0)                   # its 1,100-token prefix was still cached
    assert p.ctx.recomputed_tokens == 0
    call(2, 1600, 1600, 4.0)                  # evicted while the session was away: 1,400 again
    assert p.ctx.recomputed_tokens == 1399    # (less the first token, which its prefill sampled)
    assert p.ctx.return_gap_s == 1.0          # each call came back 1 s after the last one ended


def test_below_the_recompute_budget_w_min_sessions_share_the_cache_past_it_only_what_fits():
    for recomputing, admits in ((False, ["new"]), (True, [])):
        a, ctx = AimdAdmission(AimdConfig(w_init=50)), ctx_with(total=1000)
        admitted(a, ctx, {"s0": 4000, "s1": 4000, "s2": 4000}, engaged=True)   # 3 x 250 blocks
        run_ticks(a, ctx, 20.0, recomputing)
        assert a.kv_bound is recomputing and a.stats()["kv_bound"] is recomputing
        new = Session("new", 0.0, 4000, prompt_tokens=4000)    # 1,000 blocks > 900 resident
        assert [s.session_id for s in a.select([new], ctx)] == admits
        assert a.kv.admit_blocks == 900                         # all engaged: the window is resident


def test_past_the_recompute_budget_sessions_are_paused_past_the_cache_the_smallest_first():
    a, ctx = AimdAdmission(AimdConfig(w_init=50)), ctx_with(total=1000)
    ss = admitted(a, ctx, {"old": 4800, "s1": 3200, "s2": 4000, "s3": 3200}, engaged=True)
    run_ticks(a, ctx, 20.0, recomputing=True)
    assert a.kv_bound and a.working_set.blocks == 950           # over the 900 resident, not the cache
    assert not any(a.suspend(s, ctx) for s in ss.values())
    ss["s3"].context_tokens = 4800                               # 1,050 blocks
    a.tick(ctx)
    assert [sid for sid, s in ss.items() if a.suspend(s, ctx)] == ["s1"]   # not the youngest (s3)


def test_a_thrashing_cache_holds_an_idle_engine_only_while_a_return_is_nearer_than_a_re_prefill():
    """Admitting an 8,000-token session beside 750 blocks evicts 350 blocks (5,600 tokens, 1.12 s
    at 5,000 tokens/s): worth it against a mean gap of 60 s between calls, not of 0.5 s."""
    for gap, admits in ((0.5, []), (60.0, ["new"])):
        a, ctx = AimdAdmission(AimdConfig(w_init=50)), ctx_with(total=1000)
        admitted(a, ctx, {"s0": 4000, "s1": 4000, "s2": 4000}, engaged=False)
        ctx.now, ctx.return_gap_s = 0.1, gap
        run_ticks(a, ctx, 20.0, recomputing=True)
        new = Session("new", 0.0, 8000, prompt_tokens=8000)
        assert [s.session_id for s in a.select([new], ctx)] == admits
        held = not admits
        assert (a.stats()["idle_holds"] > 0) is held and (a.liveness_bound_s(ctx) is None) is held
    # below the budget an idle engine takes the head within a control period, as ever
    a, ctx = AimdAdmission(AimdConfig(w_init=50)), ctx_with(total=1000)
    admitted(a, ctx, {"s0": 4000, "s1": 4000, "s2": 4000, "s3": 4000}, engaged=False)
    ctx.now, ctx.return_gap_s = 0.1, 0.5
    run_ticks(a, ctx, 1.0, recomputing=False)
    assert [s.session_id for s in a.select([Session("new", 0.0, 8000, prompt_tokens=8000)], ctx)] == ["new"]


def test_a_cache_that_holds_many_sessions_is_shared_in_time_whatever_it_recomputes():
    """With 28 footprints fitting resident the engaged share is steady: a high recompute share is
    the price of the concurrency it buys (the H200 heavy point runs at 0.9), not a bottleneck."""
    a, ctx = AimdAdmission(AimdConfig(w_init=50)), ctx_with(total=1000)
    admitted(a, ctx, {"s0": 500, "s1": 500, "s2": 500}, engaged=True)         # 3 x 32 blocks
    run_ticks(a, ctx, 20.0, recomputing=True)
    assert a.recompute_share > a.config.recompute_budget and a.sessions_fit == 900 * 3 / 96
    assert not a.kv_bound


def test_once_the_cache_is_the_bottleneck_it_stays_so_until_twice_w_min_footprints_fit():
    """Pauses and returns move the fit across W_min every few seconds; the rule must not flip
    with it (sharing again is what made the cache thrash)."""
    def fit_after(a: AimdAdmission, ctx: PolicyContext, ss: dict[str, Session], tokens: int) -> float:
        for s in ss.values():
            s.context_tokens = s.prompt_tokens = tokens
        run_ticks(a, ctx, 1.0, recomputing=True)
        return a.sessions_fit

    a, ctx = AimdAdmission(AimdConfig(w_init=50)), ctx_with(total=1000)
    ss = admitted(a, ctx, {"s0": 4000, "s1": 4000, "s2": 4000}, engaged=True)   # 3.6 fit
    run_ticks(a, ctx, 20.0, recomputing=True)
    assert a.kv_bound
    assert fit_after(a, ctx, ss, 2000) == 7.2 and a.kv_bound      # between W_min and 2 x W_min: stays
    assert fit_after(a, ctx, ss, 1000) > 8 and not a.kv_bound     # past 2 x W_min: leaves
    assert fit_after(a, ctx, ss, 2000) == 7.2 and not a.kv_bound  # and enters again only below W_min


def test_leaving_the_bound_counts_each_session_at_what_ended_sessions_grew_to():
    """Contexts grow turn by turn: when a large session ends and small new ones are left, the fit
    of their current footprints says the cache is free again, and sharing it would thrash it again
    once they grow. Leaving reads them at the mean footprint the ended sessions reached."""
    def after_the_end(ended_tokens: int) -> AimdAdmission:
        a, ctx = AimdAdmission(AimdConfig(w_init=50)), ctx_with(total=1000)
        ss = admitted(a, ctx, {"s0": 4000, "s1": 4000, "s2": 4000}, engaged=True)   # 3.6 fit
        run_ticks(a, ctx, 20.0, recomputing=True)
        assert a.kv_bound
        ss["s0"].context_tokens = ss["s0"].prompt_tokens = ended_tokens
        ss["s0"].ended = True
        for s in (ss["s1"], ss["s2"]):
            s.context_tokens = s.prompt_tokens = 800                  # 50 blocks each: 36 would fit
        run_ticks(a, ctx, 1.0, recomputing=True)
        return a
    stays = after_the_end(4000)                 # the ended session grew to 250 blocks
    assert stays.working_set.grown_blocks() == 250 and stays.kv_bound and stays.sessions_fit == 3.6
    leaves = after_the_end(800)                 # it ended as small as the others are now
    assert leaves.working_set.grown_blocks() == 50 and not leaves.kv_bound
