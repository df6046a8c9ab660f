"""Simulator behaviour: completion, KV invariants, prefix caching, pins, tools, preemption."""
import math

import pytest

from mars_openhands.core.strategies import Admission
from mars_openhands.events import CpuTelemetry, PrefillStarted, ToolFinished, ToolStarted
from mars_openhands.sim import run_simulation
from mars_openhands.sim.engine import Engine, SimulationError
from mars_openhands.sim.kv import KVError
from mars_openhands.sim.runner import ideal_latency

from .helpers import TINY, OneAtATime, PinFor, custom_policy, growing, make_engine, session


def _totals(engine: Engine) -> tuple[int, int, int]:
    prompts = sum(t.input_tokens for s in engine.sessions for t in s.trace.turns)
    outputs = sum(t.output_tokens - 1 for s in engine.sessions for t in s.trace.turns)
    return prompts, outputs, sum(len(s.trace.turns) for s in engine.sessions)


def _assert_drained(engine: Engine) -> None:
    assert all(s.finish_s is not None for s in engine.sessions)
    assert engine.pool.free == engine.pool.total, "every block back in the free queue"
    assert all(not ch.holders for ch in engine.cache.chains)
    c, pins, sched = engine.counters, engine.pins, engine.scheduler
    assert c.pins_made == c.pins_released and not pins.pins and pins.pinned_now == 0
    assert not sched.running and not sched.waiting and not engine.backlog and not sched.window


def test_lone_session_takes_exactly_its_ideal_latency():
    tr = growing("s", 2.0, 5, first=700, grow=300, out=40, tool=1.5)
    eng = make_engine([tr])
    eng.run()
    assert eng.sessions[0].finish_s - 2.0 == pytest.approx(ideal_latency(tr, TINY), rel=1e-9)


def test_tokens_conserved_and_blocks_freed_under_kv_scarcity():
    # long replies grow the KV of admitted calls past what is free: decode must preempt
    sessions = [growing(f"s{i}", 0.1 * i, 5, first=900, grow=250, out=400, tool=0.2) for i in range(12)]
    eng = make_engine(sessions, kv_blocks=260)
    eng.run()                                          # check=True: KV invariants after every step
    prompts, decodes, calls = _totals(eng)
    c = eng.counters
    assert c.preemptions > 0 and c.preempt_recompute > 0
    assert c.prefill_tokens + c.decode_tokens == prompts - c.prefix_hit_tokens + decodes + c.preempt_recompute
    assert c.decode_tokens <= decodes
    assert c.evict_recompute <= c.prefill_tokens
    _assert_drained(eng)
    assert eng.pool.allocated == eng.pool.returned, "every block taken is given back exactly once"


def test_warm_turns_hit_the_prefix_cache_and_system_prompt_is_shared():
    bs = TINY.block_size
    a = growing("a", 0.0, 3, first=500, grow=64, out=32, tool=1.0, sys_id="sp", sys_tokens=200)
    b = growing("b", 30.0, 1, first=500, sys_id="sp", sys_tokens=200)
    eng = make_engine([a, b])
    eng.run()
    # a: turn 0 cold; turns 1-2 hit the whole previous context in full blocks (never the last token)
    hits_a = sum((min(tr_prev.input_tokens + tr_prev.output_tokens - 1, tr.input_tokens - 1) // bs) * bs
                 for tr_prev, tr in zip(a.turns, a.turns[1:]))
    assert eng.counters.prefix_hit_tokens == hits_a + (200 // bs) * bs   # b reuses a's system prompt blocks
    assert eng.counters.evict_recompute == 0


def test_condensed_context_only_hits_the_kept_prefix():
    bs = TINY.block_size
    tr = session("c", 0.0, [(800, 40, 0.3), (900, 40, 0.3), (500, 20, None)], shared={2: 320})
    eng = make_engine([tr])
    eng.run()
    assert eng.counters.prefix_hit_tokens == (839 // bs) * bs + (320 // bs) * bs


def test_pins_keep_blocks_through_pressure_and_are_released_once():
    def run(retention):
        # "a" pauses in a 5 s tool while 6 other sessions fill the cache with fresh context
        a = session("a", 0.0, [(1500, 20, 5.0), (1600, 20, None)])
        others = [growing(f"o{i}", 0.5 + 0.1 * i, 3, first=1200, grow=100, out=30, tool=0.1) for i in range(6)]
        pol = custom_policy(TINY, retention=retention, kv_blocks=300)
        eng = make_engine([a, *others], policy=pol, kv_blocks=300)
        eng.run()
        _assert_drained(eng)
        return eng

    plain = run(None)
    pinned = run(PinFor(60.0, revocable=False, only={"a"}))
    a_plain = [s for s in plain.sessions if s.sid == "a"][0]
    a_pinned = [s for s in pinned.sessions if s.sid == "a"][0]
    assert a_plain.recomputed > 1000, "unpinned, a's context was evicted during its tool"
    assert a_pinned.recomputed == 0, "pinned, a's warm turn hit all of it"
    # one pin per turn (the last one at session end)
    assert pinned.counters.pins_made == pinned.counters.pins_released == 2
    # held from the end of turn 0 until turn 1's lookup, 5 s later (plus queueing)
    assert pinned.counters.pinned_block_seconds >= 5.0 * (1519 // TINY.block_size)


def test_revocable_blocks_count_a_shared_prefix_once_and_not_what_a_running_call_holds():
    """Admission counts what revoking pins frees: pins of two sessions on one system prompt hold
    its blocks together, and while a third session's call runs on it they free none of them. The
    control plane reads that count fresh at each of its ticks."""
    bs, sys_blocks = TINY.block_size, 480 // TINY.block_size
    seen: dict[str, tuple[int, int]] = {}
    ticks: list[tuple[int, int]] = []

    class Recording(PinFor):
        def pin_ttl(self, session, context_tokens, blocks, ctx):
            seen.setdefault(session.session_id, (ctx.kv.pinned_blocks, eng.pins.revocable_blocks()))
            return super().pin_ttl(session, context_tokens, blocks, ctx)

    class AdmitAll(Admission):
        def tick(self, ctx):
            ticks.append((ctx.kv.revocable_blocks, eng.pins.revocable_blocks()))

        def select(self, backlog, ctx):
            return list(backlog)

    a = session("a", 0.0, [(1000, 20, 50.0), (1100, 20, None)], sys_id="sp", sys_tokens=480)
    b = session("b", 0.0, [(1000, 20, 50.0), (1100, 20, None)], sys_id="sp", sys_tokens=480)
    c = session("c", 5.0, [(1000, 20, 50.0), (1100, 20, None)], sys_id="sp", sys_tokens=480)
    d = session("d", 10.0, [(1000, 20, 50.0), (1100, 20, None)], sys_id="other", sys_tokens=480)
    pol = custom_policy(TINY, retention=Recording(1000.0, only={"a", "b"}), admission=AdmitAll())
    eng = make_engine([a, b, c, d], policy=pol)
    eng.run()
    _assert_drained(eng)
    own = 1019 // bs - sys_blocks            # each pin: the system prompt's blocks + its own full ones
    pinned_c, revocable_c = seen["c"]        # a and b pinned, c's call running on their prompt
    assert pinned_c == 2 * (sys_blocks + own) and revocable_c == 2 * own
    pinned_d, revocable_d = seen["d"]        # a and b pinned, nobody else on their prompt
    assert pinned_d == 2 * (sys_blocks + own) and revocable_d == sys_blocks + 2 * own
    assert sys_blocks + 2 * own in {told for told, _ in ticks}
    assert all(told == now for told, now in ticks)


def test_revocable_pins_give_way_to_waiting_work():
    def b_latency(revocable: bool) -> float:
        a = session("a", 0.0, [(1500, 20, 50.0), (1600, 20, None)])
        b = session("b", 1.0, [(3500, 200, None)])      # needs the blocks a's pin holds
        pol = custom_policy(TINY, retention=PinFor(1000.0, revocable=revocable), kv_blocks=260)
        eng = make_engine([a, b], policy=pol, kv_blocks=260)
        eng.run()
        _assert_drained(eng)
        assert eng.counters.preemptions == 0
        return [s.finish_s for s in eng.sessions if s.sid == "b"][0] - 1.0

    assert b_latency(revocable=True) < 5.0            # the pin was revoked at once
    assert b_latency(revocable=False) > 49.0          # b waited until a's tool ended (t = 50 s)


def test_tool_calls_queue_when_workers_are_busy():
    events = []
    sessions = [session(f"s{i}", 0.0, [(200, 10, 4.0), (230, 10, None)]) for i in range(3)]
    eng = make_engine(sessions, workers=1, events=events)
    eng.run()
    waits = sorted(e.queue_wait_s for e in events if isinstance(e, ToolFinished))
    assert waits[0] == pytest.approx(0.0, abs=1e-9)
    assert waits[1] == pytest.approx(4.0, abs=0.05) and waits[2] == pytest.approx(8.0, abs=0.05)
    assert max(e.tools_in_flight for e in events if isinstance(e, CpuTelemetry)) == 3
    assert all(e.expected_duration_s is None for e in events if isinstance(e, ToolStarted))
    # the queue delays the sessions: e2e exceeds ideal by the wait
    res = sorted(s.finish_s - s.trace.arrival_s - ideal_latency(s.trace, TINY) for s in eng.sessions)
    assert res[2] > 7.9


def test_parked_sessions_wait_for_admission():
    events = []
    sessions = [growing(f"s{i}", 0.0, 3, tool=0.5) for i in range(4)]
    pol = custom_policy(TINY, admission=OneAtATime())
    eng = make_engine(sessions, policy=pol, events=events)
    eng.run()
    _assert_drained(eng)
    first_prefill = {}
    for e in events:
        if isinstance(e, PrefillStarted):
            first_prefill.setdefault(e.session_id, e.t)
    spans = sorted((first_prefill[s.sid], s.finish_s) for s in eng.sessions)
    for (_, f0), (s1, _) in zip(spans, spans[1:]):
        assert s1 >= f0, "one session at a time"
    assert any(n > 0 for *_, n in eng.timeline.samples), "parked sessions show as waiting"


def test_active_window_bounds_running_plus_waiting():
    seen = []
    sessions = [session(f"s{i}", 0.0, [(600, 30, None)]) for i in range(5)]
    pol = custom_policy(TINY, max_active=2)
    original = pol.on_step
    pol.on_step = lambda sched, waiting, now: (seen.append(len(sched) + len(waiting)), original(sched, waiting, now))
    eng = make_engine(sessions, policy=pol)
    eng.run()
    _assert_drained(eng)
    assert max(seen) == 2


@pytest.mark.parametrize("policy", ["fcfs", "autellix", "infercept", "continuum", "continuum-dy", "mars"])
def test_every_policy_completes_every_session_within_its_ideal(policy):
    sessions = [growing(f"s{i}", 0.3 * i, 5, first=800 + 50 * i, grow=200, out=40, tool=0.2 + 0.1 * (i % 3),
                        sys_id="sp", sys_tokens=300) for i in range(10)]
    eng = make_engine(sessions, policy=policy, kv_blocks=320)
    eng.run()
    _assert_drained(eng)
    for s in eng.sessions:
        assert s.finish_s - s.trace.arrival_s >= ideal_latency(s.trace, TINY) - 1e-9


def test_fast_forward_equals_single_stepping_for_fcfs():
    sessions = [growing(f"s{i}", 0.2 * i, 4, first=600, grow=150, out=120, tool=0.4) for i in range(8)]
    a = make_engine(sessions, kv_blocks=200, check=False)
    b = make_engine(sessions, kv_blocks=200, check=False, fast_forward=False)
    a.run()
    b.run()
    assert a.counters.batches < b.counters.batches
    assert [s.finish_s for s in a.sessions] == pytest.approx([s.finish_s for s in b.sessions], rel=1e-9)
    ca, cb = a.counters, b.counters
    assert (ca.preemptions, ca.prefill_tokens, ca.decode_tokens, ca.prefix_hit_tokens) == \
        (cb.preemptions, cb.prefill_tokens, cb.decode_tokens, cb.prefix_hit_tokens)


def test_run_simulation_is_deterministic_and_fills_the_result():
    sessions = [growing(f"s{i}", 0.5 * i, 4, tool=1.0, sys_id="sp", sys_tokens=100) for i in range(6)]
    r1 = run_simulation(sessions, TINY, "fcfs", kv_blocks=150)
    r2 = run_simulation(list(reversed(sessions)), TINY, "fcfs", kv_blocks=150)
    assert [(s.session_id, s.finish_s) for s in r1.sessions] == [(s.session_id, s.finish_s) for s in r2.sessions]
    assert r1.timeline == r2.timeline
    assert (r1.prefix_hit_tokens, r1.recomputed_prefill_tokens, r1.preemptions) == \
        (r2.prefix_hit_tokens, r2.recomputed_prefill_tokens, r2.preemptions)
    assert r1.prefix_hit_tokens > 0 and all(s.finish_s and s.ideal_s > 0 for s in r1.sessions)
    end = max(s.finish_s for s in r1.sessions)
    assert len(r1.timeline) == math.floor(end) + 1
    assert [t for t, *_ in r1.timeline] == [float(i) for i in range(len(r1.timeline))]
    assert all(0.0 <= u <= 1.0 and w is None for _, w, u, *_ in r1.timeline)


def test_a_pin_cannot_be_released_twice():
    eng = make_engine([session("a", 0.0, [(600, 10, 30.0), (700, 10, None)])],
                      policy=custom_policy(TINY, retention=PinFor(100.0)))
    eng.start()
    eng.events_until(0.0)                   # a's first turn arrives, runs, ends in a tool: pinned
    while eng.scheduler.running or eng.scheduler.waiting:
        eng.step()
    pin = eng.pins.pins["a"]
    eng.pins.release(pin, eng.now)
    with pytest.raises(KVError, match="released twice"):
        eng.pins.release(pin, eng.now)


def test_a_policy_that_never_admits_is_reported_not_spun_forever():
    class Never(OneAtATime):
        def select(self, backlog, ctx):
            return []

    eng = make_engine([growing("s", 0.0, 2)], policy=custom_policy(TINY, admission=Never()))
    eng.stall_s = 60.0
    with pytest.raises(SimulationError, match="admitted none of 1 parked sessions in 60 s"):
        eng.run()


def test_bad_input_names_what_is_wrong():
    with pytest.raises(ValueError, match="unknown profile 'nope'"):
        run_simulation([growing("s", 0, 2)], "nope", "fcfs")
    with pytest.raises(ValueError, match="unknown policy"):
        run_simulation([growing("s", 0, 2)], TINY, "nope")
    with pytest.raises(ValueError, match="session 'big' turn 0"):
        run_simulation([session("big", 0, [(5000, 10, None)])], TINY, "fcfs", kv_blocks=100)
    with pytest.raises(ValueError, match="kv_blocks must be >= 1"):
        run_simulation([growing("s", 0, 2)], TINY, "fcfs", kv_blocks=0)
    with pytest.raises(ValueError, match="no sessions"):
        run_simulation([], TINY, "fcfs")
