"""KV retention rules: InferCept min-waste, Continuum fixed / dynamic TTL, our priced rule."""
from __future__ import annotations

import math
import random

import pytest

from mars_openhands.core import EngineShape, Request, build_policy
from mars_openhands.core.continuum import ContinuumConfig, DynamicTtlRetention, FixedTtlRetention
from mars_openhands.core.priced import PricedConfig, PricedRetention
from mars_openhands.core.registry import PolicyConfig
from mars_openhands.events import EngineTelemetry, SessionEnded, ToolCancelled, ToolFinished, ToolStarted

SHAPE = EngineShape(total_blocks=10_000, block_size=16, tool_workers=4)


def end_turn(p, session: str, now: float, context: int = 1600, blocks: int = 100, arrival=None):
    """A call of `session` arrives, runs and finishes at `now`; returns the finish decision
    (the pin, if offered, is recorded like an engine would)."""
    t0 = now - 1.0 if arrival is None else arrival
    req = Request(f"{session}@{now}", session, t0, context - 10)
    p.on_request_arrival(req, t0)
    if (pin := p.resume_pin(session)) is not None:
        assert pin.session_id == session
    req.computed_tokens, req.output_tokens = req.prompt_tokens, 10
    p.on_step([(req, req.prompt_tokens)], [], t0 + 0.5)
    d = p.on_request_finished(req, blocks, now)
    if d.pin is not None:
        p.record_pin(session, blocks, d.pin, now)
    return d


def tool_done(p, session: str, t: float, seconds: float, name: str = "terminal",
              command: str | None = "ls", wait: float = 0.0) -> None:
    p.on_event(ToolStarted(session, t - seconds, name, command=command))
    p.on_event(ToolFinished(session, t, name, seconds, command=command, queue_wait_s=wait))


# ---- InferCept -----------------------------------------------------------------------------

def test_infercept_ttl_is_discard_cost_over_context():
    p = build_policy("infercept", SHAPE)
    # other running requests hold 2000 - 100 (this call) blocks = 30,400 tokens
    p.on_event(EngineTelemetry(0.0, free_blocks=8000, total_blocks=10_000))
    d = end_turn(p, "s", 1.0, context=1600, blocks=100)
    c, c_other = 1600, (2000 - 100) * 16
    discard = 0.0002 * c * (c + c_other) / 2
    assert d.pin.ttl_s == pytest.approx(discard / c)
    assert d.pin.ttl_s == pytest.approx(0.0002 * (c + c_other) / 2)       # = 3.2 s


def test_infercept_pinned_blocks_are_not_running_work_and_tiny_ttls_are_skipped():
    p = build_policy("infercept", SHAPE)
    p.on_event(EngineTelemetry(0.0, free_blocks=7000, total_blocks=10_000, pinned_blocks=1000))
    d = end_turn(p, "s", 1.0, context=1600, blocks=100)
    assert d.pin.ttl_s == pytest.approx(0.0002 * (1600 + 1900 * 16) / 2)
    p.on_event(EngineTelemetry(2.0, free_blocks=10_000, total_blocks=10_000))
    assert end_turn(p, "t", 3.0, context=50, blocks=0).pin is None        # nothing to keep
    assert end_turn(p, "u", 4.0, context=60, blocks=4).pin is None        # ttl 6 ms < 10 ms


def test_infercept_can_use_the_measured_prefill_rate():
    p = build_policy("infercept", SHAPE, PolicyConfig().with_overrides({"infercept.fwd_s_per_token": None}))
    p.ctx.prefill_tps = 1000.0
    p.on_event(EngineTelemetry(0.0, free_blocks=10_000 - 100, total_blocks=10_000))
    assert end_turn(p, "s", 1.0, context=1600, blocks=100).pin.ttl_s == pytest.approx(1600 / 1000 / 2)


# ---- Continuum fixed TTL -------------------------------------------------------------------

def test_continuum_pins_2s_only_for_tools_whose_mean_is_at_most_2s():
    p = build_policy("continuum", SHAPE)
    for i, secs in enumerate((1.0, 3.0, 2.0)):          # "fast": mean 2.0
        tool_done(p, "w", 10.0 + i, secs, name="fast")
    for i, secs in enumerate((2.0, 2.5)):                # "slow": mean 2.25
        tool_done(p, "w", 20.0 + i, secs, name="slow")
    r: FixedTtlRetention = p.retention
    assert r.mean_duration("fast") == pytest.approx(2.0) and r.mean_duration("slow") == pytest.approx(2.25)
    for sid, tool, pinned in (("a", "fast", True), ("b", "slow", False), ("c", "never-seen", True)):
        p.on_request_arrival(Request(sid, sid, 30.0, 100), 30.0)
        p.on_event(ToolStarted(sid, 30.5, tool))        # engine knew the tool when the turn ended
        d = p.on_request_finished(Request(sid, sid, 30.0, 100, computed_tokens=100), 10, 31.0)
        assert (d.pin is not None) == pinned, sid
        if pinned:
            assert d.pin.ttl_s == 2.0


def test_continuum_learns_the_tool_at_tool_start_and_drops_a_slow_tools_pin():
    p = build_policy("continuum", SHAPE)
    tool_done(p, "w", 5.0, 9.0, name="pytest-run", wait=1.0)          # mean 10 s (run + wait)
    d = end_turn(p, "s", 10.0)
    assert d.pin is not None and d.pin.ttl_s == 2.0                   # tool unknown yet
    p.on_event(ToolStarted("s", 10.2, "pytest-run"))
    assert p.ctx.pins.get("s").expires_s == pytest.approx(10.2)
    assert [x.session_id for x in p.expired_pins(10.2)] == ["s"]
    d = end_turn(p, "t", 20.0)
    p.on_event(ToolStarted("t", 20.1, "fast-tool"))
    assert p.ctx.pins.get("t").expires_s == pytest.approx(22.0)


def test_continuum_holds_the_pin_until_the_next_call_finishes():
    p = build_policy("continuum", SHAPE)
    end_turn(p, "s", 1.0)
    assert p.ctx.pins.get("s").expires_s == pytest.approx(3.0)
    nxt = Request("s2", "s", 2.5, 2000)
    p.on_request_arrival(nxt, 2.5)
    assert p.resume_pin("s") is None                                  # not released on resume
    assert p.expired_pins(10.0) == []                                 # queued/running: held
    nxt.computed_tokens = nxt.prompt_tokens
    d = p.on_request_finished(nxt, 120, 11.0)
    assert [x.session_id for x in d.release] == ["s"]                 # released when it finishes
    assert d.pin is not None                                          # and a new pin is offered


def test_continuum_pin_expires_without_a_queued_call():
    p = build_policy("continuum", SHAPE)
    end_turn(p, "s", 1.0)
    assert p.expired_pins(2.9) == [] and [x.session_id for x in p.expired_pins(3.0)] == ["s"]


# ---- Continuum dynamic TTL -----------------------------------------------------------------

def brute_force_tau(records, base):
    best_tau, best = 0.0, -math.inf
    for tau in sorted({0.0, *records}):
        reward = sum(1 for t in records if t <= tau) / len(records) * base - tau
        if reward > best:
            best_tau, best = tau, reward
    return best_tau if best > 0 else 0.0


def test_continuum_dy_uses_2s_until_100_samples_then_the_argmax_of_p_times_base_minus_tau():
    r = DynamicTtlRetention()
    rng = random.Random(3)
    records = []
    for _ in range(100):
        d = round(rng.lognormvariate(-0.5, 1.2), 3)
        records.append(d)
        r._learn("terminal", d)
    assert r.ttl_for("terminal", 10_000) == 2.0                       # 100 samples: still cold
    d = round(rng.lognormvariate(-0.5, 1.2), 3)
    records.append(d)
    r._learn("terminal", d)
    for context in (2_000, 10_000, 40_000):
        base = 0.0002 * context                                      # T = 0: no preemptions
        assert r.ttl_for("terminal", context) == pytest.approx(brute_force_tau(records, base))
    assert r.ttl_for("terminal", 10_000) > r.ttl_for("terminal", 2_000)


def test_continuum_dy_uses_a_tools_own_records_once_it_has_more_than_100():
    r = DynamicTtlRetention()
    for _ in range(101):
        r._learn("slow", 50.0)                    # global: 101 samples of 50 s
    assert r.ttl_for("fast", 20_000) == 0.0       # fast unknown -> global records: not worth it
    for _ in range(101):
        r._learn("fast", 0.5)
    assert r.ttl_for("fast", 20_000) == pytest.approx(0.5)
    assert r.ttl_for("slow", 20_000) == 0.0


def test_continuum_dy_queue_delay_from_readmissions_and_eta_from_finished_sessions():
    p = build_policy("continuum-dy", SHAPE)
    r: DynamicTtlRetention = p.retention
    assert r.queue_delay_s() == 0.0 and r.eta() == 1.0
    reqs = [Request(f"r{i}", "x", 0.0, 100) for i in range(3)]
    for i, req in enumerate(reqs):
        p.on_request_arrival(req, 0.0)
        p.on_preempted(req, 1.0)
        p.on_step([(req, 10)], [], 1.0 + (i + 1))                    # back after 1, 2, 3 s
    assert r.queue_delay_s() == pytest.approx(2.0)
    p.on_step([(reqs[0], 10)], [], 9.0)                               # not a re-admission
    assert r.queue_delay_s() == pytest.approx(2.0)
    # sessions of 2 and 4 turns: pairs (k, N-k) = (0,2),(1,1),(0,4),(1,3),(2,2),(3,1)
    for sid, turns in (("a", 2), ("b", 4)):
        for k in range(turns):
            end_turn(p, sid, 10.0 + k)
        p.on_event(SessionEnded(sid, 20.0))
    xs, ys = [0, 1, 0, 1, 2, 3], [2, 1, 4, 3, 2, 1]
    mx, my = sum(xs) / 6, sum(ys) / 6
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    corr = cov / math.sqrt(sum((x - mx) ** 2 for x in xs) * sum((y - my) ** 2 for y in ys))
    assert r.eta() == pytest.approx(-corr)


def test_continuum_dy_window_keeps_the_last_200_delays():
    r = DynamicTtlRetention(ContinuumConfig(delay_window=200))
    for i in range(250):
        r.on_readmitted(None, float(i), None)
    assert r.queue_delay_s() == pytest.approx(sum(range(50, 250)) / 200)


# ---- our priced rule -----------------------------------------------------------------------

def priced(gain: float = 50.0):
    return build_policy("mars", SHAPE, PolicyConfig().with_overrides({"priced.price_gain": gain}))


def test_priced_rule_pins_when_kv_is_free():
    p = priced()
    p.ctx.prefill_tps = 10_000.0
    p.on_event(EngineTelemetry(0.0, free_blocks=9000, total_blocks=10_000, waiting_demand_blocks=500))
    r: PricedRetention = p.retention
    assert r.shadow_price(p.ctx) == 0.0
    d = end_turn(p, "s", 1.0, context=16_000, blocks=1000)
    assert d.pin is not None
    # lambda = 0: hold to the predictor's 99.5 % quantile
    q = r.durations.quantile(None, None, 0.995)
    assert d.pin.ttl_s == pytest.approx(q, rel=0.35) and d.pin.value_density > 0


def test_priced_rule_refuses_when_the_shadow_price_is_high():
    p = priced()
    p.ctx.prefill_tps = 10_000.0
    p.on_event(EngineTelemetry(0.0, free_blocks=500, total_blocks=10_000, waiting_demand_blocks=5000))
    r: PricedRetention = p.retention
    lam = r.shadow_price(p.ctx)
    assert lam == pytest.approx(50 * (16 / 10_000) * 4500 / 10_000)
    assert end_turn(p, "s", 1.0, context=16_000, blocks=1000).pin is None


def test_priced_rule_holds_shorter_as_the_deficit_grows():
    p = priced()
    p.ctx.prefill_tps = 10_000.0
    holds = []
    for deficit in (0, 20, 100, 400):
        p.on_event(EngineTelemetry(0.0, free_blocks=1000, total_blocks=10_000,
                                   waiting_demand_blocks=1000 + deficit))
        hold, value, _ = p.retention.best_hold(None, 16_000, 1000, p.ctx)
        holds.append(hold)
    assert holds == sorted(holds, reverse=True) and holds[0] > holds[-1]


def test_priced_rule_benefit_counts_recompute_and_requeue_delay():
    p = priced()
    p.ctx.prefill_tps = 8000.0
    p.ctx.kv.prefill_start_latency_s = 0.5
    assert p.retention.resume_gain_s(16_000, p.ctx) == pytest.approx(2.0 + 0.5)


def test_priced_rule_reprices_on_tool_start_with_what_it_learned_per_tool():
    p = priced()
    p.ctx.prefill_tps = 10_000.0
    for i in range(200):
        tool_done(p, "w", 100.0 + i, 0.2, command="ls -la")
        tool_done(p, "w", 100.5 + i, 60.0, command="python -m pytest -q tests")
    # modest pressure so the hold is a trade-off
    p.on_event(EngineTelemetry(500.0, free_blocks=1000, total_blocks=10_000, waiting_demand_blocks=1200))
    end_turn(p, "a", 501.0, context=16_000, blocks=1000)
    end_turn(p, "b", 501.0, context=16_000, blocks=1000)
    p.on_event(ToolStarted("a", 501.1, "terminal", command="ls src"))
    p.on_event(ToolStarted("b", 501.1, "terminal", command="python -m pytest -q tests"))
    pin_a, pin_b = p.ctx.pins.get("a"), p.ctx.pins.get("b")
    assert pin_a is not None and 501.1 + 0.2 <= pin_a.expires_s <= 501.1 + 1.0
    assert pin_b is None or pin_b.expires_s <= 501.1                  # 60 s tool: not worth it
    assert pin_a.value_density > 0


def test_priced_rule_reprices_every_pin_when_pressure_appears():
    p = priced()
    p.ctx.prefill_tps = 10_000.0
    p.on_event(EngineTelemetry(0.0, free_blocks=9000, total_blocks=10_000))
    end_turn(p, "s", 1.0, context=16_000, blocks=1000)
    before = p.ctx.pins.get("s").expires_s
    p.on_event(EngineTelemetry(2.0, free_blocks=100, total_blocks=10_000, waiting_demand_blocks=6000))
    after = p.ctx.pins.get("s").expires_s
    assert after < before and after == pytest.approx(2.0)             # expire now
    assert [x.session_id for x in p.expired_pins(2.0)] == ["s"]


def test_priced_rule_declared_hint_moves_the_hold():
    r = PricedRetention(PricedConfig())
    from mars_openhands.core.context import PolicyContext
    from mars_openhands.core.model import CpuState, KVState
    ctx = PolicyContext(KVState(10_000, 1000, 16, waiting_demand_blocks=1100), CpuState(4))
    ctx.prefill_tps = 10_000.0
    short = r.best_hold(ToolStarted("s", 0.0, "terminal", "x", expected_duration_s=0.5), 16_000, 1000, ctx)
    long = r.best_hold(ToolStarted("s", 0.0, "terminal", "x", expected_duration_s=120.0), 16_000, 1000, ctx)
    assert short[0] > 0 and (long[0] == 0 or long[1] < short[1])


def test_priced_rule_forgets_tool_state_on_cancel_and_session_end():
    p = priced()
    end_turn(p, "s", 1.0)
    p.on_event(ToolStarted("s", 1.1, "terminal", command="sleep 100"))
    assert [x.session_id for x in p.on_event(ToolCancelled("s", 2.0, "terminal"))] == ["s"]
    assert p.retention._tools.running("s") is None
    end_turn(p, "t", 3.0)
    p.on_event(ToolStarted("t", 3.1, "terminal"))
    assert p.retention._tools.running("t") is not None
    p.on_event(SessionEnded("t", 4.0))
    assert p.retention._tools.running("t") is None and len(p.ctx.pins) == 0


def brute_force_hold(r: PricedRetention, ctx, context, blocks, waited):
    pred = r.durations
    cdf = pred.cdf_at_edges(None, None)
    f0 = pred.interpolate(cdf, waited)
    gain = r.resume_gain_s(context, ctx) / (1 - f0)
    rent = blocks * r.shadow_price(ctx)
    best = (0.0, 0.0)
    for t, f in zip(pred.edges, cdf):
        if t <= waited:
            continue
        value = (f - f0) * gain - rent * (t - waited)
        if value > best[1]:
            best = (t - waited, value)
        if f >= r.config.max_quantile:
            break
    return best


@pytest.mark.parametrize("demand", [0, 1050, 1400])
@pytest.mark.parametrize("waited", [0.0, 0.7, 30.0])
def test_priced_best_hold_is_the_argmax_over_the_grid(demand, waited):
    p = priced()
    p.ctx.prefill_tps = 10_000.0
    rng = random.Random(5)
    for i in range(300):
        tool_done(p, "w", 10.0 + i, rng.lognormvariate(0.0, 1.5), command="python x.py")
    p.on_event(EngineTelemetry(400.0, free_blocks=1000, total_blocks=10_000, waiting_demand_blocks=demand))
    hold, value, _ = p.retention.best_hold(None, 16_000, 1000, p.ctx, waited)
    exp_hold, exp_value = brute_force_hold(p.retention, p.ctx, 16_000, 1000, waited)
    assert hold == pytest.approx(exp_hold) and value == pytest.approx(exp_value)
