"""Ordering rules: MARS MLFQ (levels, quanta, demotion, aging, preemption), Autellix PLAS,
Continuum program-level FCFS -- against the constants of docs/policies.md."""
from __future__ import annotations

import pytest

from mars_openhands.core import EngineShape, PinOffer, PolicyConfig, Request, build_policy
from mars_openhands.core.ordering import LEVEL_QUANTA, MlfqConfig, MlfqOrdering, PlasOrdering, size_level

SHAPE = EngineShape(total_blocks=10_000, block_size=16, tool_workers=4)


def arrive(p, rid: str, session: str, t: float, prompt: int, cached: int = 0) -> Request:
    req = Request(rid, session, t, prompt, cached_tokens=cached)
    p.on_request_arrival(req, t)
    return req


#: A call left in the engine's waiting queue: while one waits, the MLFQ's quanta bind.
QUEUED = Request("queued", "other", 0.0, 500)


def run_step(p, req: Request, now: float, budget: int = 100_000, report_first: bool = False,
             waiting: tuple[Request, ...] = (QUEUED,)) -> int:
    """Schedule `req` the way an engine does: quantum-capped chunk, then apply it and report the
    step with `waiting` left waiting -- in either order (the simulator reports first, the vLLM
    adapter applies first)."""
    n = p.chunk_tokens(req, budget)
    if report_first:
        p.on_step([(req, n)], list(waiting), now)
    if req.is_prefill:
        req.computed_tokens = max(req.computed_tokens, req.cached_tokens) + n
    else:
        req.output_tokens += n
    if not report_first:
        p.on_step([(req, n)], list(waiting), now)
    return n


both_timings = pytest.mark.parametrize("report_first", [False, True], ids=["apply-then-report",
                                                                           "report-then-apply"])


# ---- MARS MLFQ -----------------------------------------------------------------------------

@pytest.mark.parametrize("tokens,level", [(1, 0), (2048, 0), (2049, 1), (8192, 1), (8193, 2),
                                          (32768, 2), (32769, 3), (200_000, 3)])
def test_level_boundaries(tokens, level):
    assert size_level(tokens) == level


def test_mlfq_level_comes_from_uncached_prefill_so_a_warm_next_turn_is_short():
    p = build_policy("mars", SHAPE)
    cold = arrive(p, "c", "s1", 0.0, 20_000)
    warm = arrive(p, "w", "s2", 0.5, 20_000, cached=19_000)    # next turn, prefix still in KV
    assert p.ordering.effective_level(cold, 0.6) == 2
    assert p.ordering.effective_level(warm, 0.6) == 0
    assert p.order([cold, warm], 0.6) == [warm, cold]
    assert p.chunk_tokens(cold, 100_000) == 512 and p.chunk_tokens(warm, 100_000) == 2048


@both_timings
def test_mlfq_demotes_one_level_after_a_full_quantum_with_prefill_left(report_first):
    p = build_policy("mars", SHAPE)
    req = arrive(p, "r", "s", 0.0, 6000)               # L0 of feedback, L1 by size
    assert run_step(p, req, 0.1, report_first=report_first) == 1024  # L1 quantum
    assert req.level == 1
    # now 4976 left (L1 by size): full quantum again -> feedback L2, quantum 512
    assert run_step(p, req, 0.2, report_first=report_first) == 1024 and req.level == 2
    assert run_step(p, req, 0.3, report_first=report_first) == 512 and req.level == 3
    assert run_step(p, req, 0.4, report_first=report_first) == 256 and req.level == 3  # capped at L3


@both_timings
def test_mlfq_quantum_binds_only_while_another_call_shares_the_step(report_first):
    p = build_policy("mars", SHAPE)
    req = arrive(p, "r", "s", 0.0, 60_000)             # L3 by size: quantum 256
    # before any step the quantum binds; this step leaves nobody waiting...
    assert run_step(p, req, 0.1, budget=8192, report_first=report_first, waiting=()) == 256
    # ...so the next chunk is bounded by the budget alone, and reaching the quantum still demotes
    assert run_step(p, req, 0.2, budget=8192, report_first=report_first) == 8192
    assert req.level == 2                   # one feedback level per step that used its quantum
    # that step left a call waiting: the quantum binds again
    assert run_step(p, req, 0.3, budget=8192, report_first=report_first, waiting=()) == 256
    assert p.steady_chunk(req) is None      # nothing to promise while the quantum does not bind
    assert run_step(p, req, 0.4, budget=8192, report_first=report_first) == 8192
    assert p.steady_chunk(req) == 256
    # a decode in the step, nobody waiting: a longer chunk would slow the decode, the quantum binds
    dec = arrive(p, "d", "t", 0.45, 100)
    dec.computed_tokens = 100
    n = p.chunk_tokens(req, 8192)
    p.on_step([(dec, 1), (req, n)], [], 0.5)
    assert n == 256 and p.chunk_tokens(req, 8192) == 256


@both_timings
def test_mlfq_no_demotion_when_the_quantum_is_not_used_up_or_prefill_ends(report_first):
    p = build_policy("mars", SHAPE)
    small = arrive(p, "a", "s", 0.0, 1500)
    assert run_step(p, small, 0.1, report_first=report_first) == 1500 and small.level == 0
    exact = arrive(p, "e", "u", 0.0, 2048)               # a full quantum that ends the prefill
    assert run_step(p, exact, 0.1, report_first=report_first) == 2048 and exact.level == 0
    budget_bound = arrive(p, "b", "t", 0.0, 1800)
    assert run_step(p, budget_bound, 0.1, budget=100, report_first=report_first) == 100
    assert budget_bound.level == 0


@both_timings
def test_mlfq_decode_is_level_zero_even_after_demotions(report_first):
    p = build_policy("mars", SHAPE)
    req = arrive(p, "r", "s", 0.0, 3000)
    run_step(p, req, 0.1, report_first=report_first)
    assert req.level == 1
    while req.is_prefill:
        run_step(p, req, 0.2, report_first=report_first)
    run_step(p, req, 0.3, report_first=report_first)   # first decode step
    assert req.level == 0 and p.ordering.effective_level(req, 0.3) == 0
    assert p.ordering.key(req, p.ctx)[0] == 0


def test_mlfq_aging_raises_one_level_per_30_s_without_service():
    p = build_policy("mars", SHAPE)
    req = arrive(p, "r", "s", 0.0, 100_000)      # L3 by size
    run_step(p, req, 1.0)
    o = p.ordering
    assert o.effective_level(req, 1.0) == 3
    assert o.effective_level(req, 30.9) == 3
    assert o.effective_level(req, 31.0) == 2
    assert o.effective_level(req, 61.0) == 1
    assert o.effective_level(req, 91.0) == 0 and o.effective_level(req, 500.0) == 0
    assert p.chunk_tokens(req, 100_000) == LEVEL_QUANTA[3]   # ctx.now is 1.0: quantum at L3
    p.ctx.now = 61.0
    assert p.chunk_tokens(req, 100_000) == LEVEL_QUANTA[1]


def test_mlfq_aging_counts_from_arrival_before_first_service():
    p = build_policy("mars", SHAPE)
    req = arrive(p, "r", "s", 10.0, 40_000)
    assert p.ordering.effective_level(req, 39.9) == 3
    assert p.ordering.effective_level(req, 40.0) == 2


def test_mlfq_preempted_request_comes_back_at_level_zero_at_the_front():
    p = build_policy("mars", SHAPE)
    big = arrive(p, "big", "s1", 0.0, 30_000)
    run_step(p, big, 0.1)
    run_step(p, big, 0.2)
    assert big.level == 2
    short = arrive(p, "short", "s2", 0.3, 100)
    p.on_preempted(big, 0.4)
    big.computed_tokens = 0
    assert big.level == 0 and p.ordering.effective_level(big, 0.5) == 0
    assert p.order([short, big], 0.5) == [big, short]
    assert p.chunk_tokens(big, 100_000) == LEVEL_QUANTA[0]
    run_step(p, big, 0.6)                       # served again: no longer "at the front"
    assert big.preempted_s == -1.0 and p.order([short, big], 0.7) == [short, big]


def test_mlfq_key_orders_level_then_least_recently_served_then_arrival():
    p = build_policy("mars", SHAPE)
    a = arrive(p, "a", "s1", 0.0, 1000)
    b = arrive(p, "b", "s2", 1.0, 1000)
    c = arrive(p, "c", "s3", 2.0, 5000)
    assert p.order([c, b, a], 3.0) == [a, b, c]
    a.last_scheduled_s, a.started = 2.5, True
    assert p.order([c, b, a], 3.0) == [b, a, c]


def test_mlfq_active_window_is_exposed_to_engines():
    assert build_policy("mars", SHAPE).max_active is None        # no W_max: admission bounds it
    preview = PolicyConfig().with_overrides({"aimd.w_max": 30, "aimd.w_init": 30})
    assert build_policy("mars", SHAPE, preview).max_active == 30
    assert build_policy("fcfs", SHAPE).max_active is None
    assert MlfqOrdering(MlfqConfig(max_active=12)).max_active == 12
    with pytest.raises(ValueError, match="quanta"):
        MlfqConfig(quanta=(1, 2))


# ---- Autellix PLAS -------------------------------------------------------------------------

def finish(p, req: Request, now: float) -> None:
    req.computed_tokens = req.prompt_tokens
    p.on_request_finished(req, 0, now)


def test_plas_entry_level_follows_program_attained_service():
    p = build_policy("autellix", SHAPE)
    first = arrive(p, "a1", "s", 0.0, 3000)
    assert first.level == 0
    p.on_step([(first, 3000)], [], 0.1)
    finish(p, first, 0.2)
    second = arrive(p, "a2", "s", 1.0, 6000)       # session served 3000 tokens: L1
    assert second.level == 1 and p.chunk_tokens(second, 100_000) == 1024
    p.ctx.sessions["s"].service_tokens = 40_000
    assert arrive(p, "a3", "s", 2.0, 10).level == 3


@both_timings
def test_plas_quantum_is_spent_across_steps_then_demotes(report_first):
    p = build_policy("autellix", SHAPE)
    req = arrive(p, "r", "s", 0.0, 10_000)
    assert run_step(p, req, 0.1, budget=1500, report_first=report_first) == 1500
    assert req.level == 0 and req.quantum_left == 548
    assert run_step(p, req, 0.2, report_first=report_first) == 548
    assert req.level == 1 and req.quantum_left == 1024
    assert run_step(p, req, 0.3, report_first=report_first) == 1024 and req.level == 2


def test_plas_wait_counts_tokens_scheduled_for_others_and_promotes_at_beta_2():
    p = build_policy("autellix", SHAPE)
    o: PlasOrdering = p.ordering
    victim = arrive(p, "v", "sv", 0.0, 8000)
    for t in (0.1, 0.2):                               # two full quanta: L0 -> L1 -> L2
        run_step(p, victim, t)
    assert victim.level == 2 and victim.attained_tokens == 2048 + 1024
    other = arrive(p, "o", "so", 0.3, 100_000)
    p.on_step([(other, 3000)], [victim], 0.4)
    assert o.wait_tokens(victim) == 3000
    assert p.ordering.key(victim, p.ctx)[0] == 2        # 3000 / 3072 < 2
    p.on_step([(other, 3143)], [victim], 0.5)           # 6143 / 3072 < 2
    assert p.ordering.key(victim, p.ctx)[0] == 2
    p.on_step([(other, 1)], [victim], 0.6)              # 6144 / 3072 = 2: promote
    assert p.ordering.key(victim, p.ctx)[0] == 0
    assert victim.quantum_left == 2048 and o.wait_tokens(victim) == 0


def test_plas_program_wait_carries_over_to_the_next_call():
    p = build_policy("autellix", SHAPE)
    first = arrive(p, "a1", "s", 0.0, 100)
    other = arrive(p, "o", "x", 0.0, 100_000)
    p.on_step([(other, 500)], [first], 0.1)
    run_step(p, first, 0.2)
    finish(p, first, 0.3)
    assert p.ctx.sessions["s"].wait_tokens == 500 and p.ctx.sessions["s"].service_tokens == 100


# ---- Continuum program-level FCFS ----------------------------------------------------------

def test_continuum_orders_by_session_first_arrival_and_pinned_sessions_first():
    p = build_policy("continuum", SHAPE)
    old = arrive(p, "old1", "old", 0.0, 100)
    new = arrive(p, "new1", "new", 5.0, 100)
    assert p.order([new, old], 6.0) == [old, new]
    finish(p, old, 6.0)
    old2 = arrive(p, "old2", "old", 20.0, 200)           # later call, session still first
    assert p.order([old2, new], 21.0) == [old2, new]
    finish(p, new, 22.0)
    d = p.on_request_finished(new, 10, 22.0)             # pin the newer session
    assert d.pin is not None
    p.record_pin("new", 10, d.pin, 22.0)
    new2 = arrive(p, "new2", "new", 22.5, 300)
    assert p.order([old2, new2], 23.0) == [new2, old2]


def test_pinned_session_key_uses_the_pin_table():
    p = build_policy("continuum", SHAPE)
    a = arrive(p, "a", "a", 0.0, 100)
    b = arrive(p, "b", "b", 1.0, 100)
    p.record_pin("b", 4, PinOffer(2.0), 1.0)
    assert p.order([a, b], 1.5) == [b, a]
    p.release_pin("b")
    assert p.order([a, b], 1.5) == [a, b]


# ---- vLLM's priority policy ----------------------------------------------------------------

def _stamped(p, rid: str, received: float, stamp: float, priority: int, prompt: int = 100) -> Request:
    req = Request(rid, rid, received, prompt, priority=priority, arrival_time=stamp)
    p.on_request_arrival(req, received)
    return req


@pytest.mark.parametrize("name", ["fcfs", "infercept", "thunderagent", "mars-no-priority"])
def test_a_stock_order_under_priority_is_vllms_priority_queue(name):
    """(priority, the request's own arrival_time, id), whatever order the engine received them in."""
    p = build_policy(name, SHAPE)
    assert p.stock_order and p.stock_victim
    a = _stamped(p, "a", 0.0, 3.0, 1)
    b = _stamped(p, "b", 1.0, 1.0, 1)
    c = _stamped(p, "c", 2.0, 9.0, 0)
    d = _stamped(p, "d", 3.0, 1.0, 1)
    assert [r.request_id for r in p.order([a, b, c, d], 4.0, by_priority=True)] == ["c", "b", "d", "a"]
    assert [r.request_id for r in p.order([a, b, c, d], 4.0)] == ["a", "b", "c", "d"]   # by arrival_s
    assert p.choose_victim([c, a, b], by_priority=True) is a      # lowest priority, latest stamp
    assert p.choose_victim([c, a, b]) is c                          # newest received


def test_a_policy_of_its_own_keeps_its_order_within_a_priority():
    """MARS under priority: priority first, then its MLFQ (a short job before a long one that was
    stamped earlier); victims only from the lowest priority class, chosen by its own rule."""
    p = build_policy("mars-no-admission", SHAPE)
    assert not p.stock_order and not p.stock_victim
    long = _stamped(p, "long", 0.0, 0.0, 1, prompt=20_000)
    short = _stamped(p, "short", 1.0, 5.0, 1, prompt=100)
    urgent = _stamped(p, "urgent", 2.0, 9.0, 0, prompt=20_000)
    assert [r.request_id for r in p.order([long, short, urgent], 3.0, by_priority=True)] == [
        "urgent", "short", "long"]
    assert p.choose_victim([urgent, long, short], by_priority=True) is long     # level 2 before 0
