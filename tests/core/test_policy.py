"""The Policy facade's bookkeeping, independent of which strategies a policy composes."""
import pytest

from mars_openhands.core import EngineShape, PinOffer, Policy, Request, build_policy
from mars_openhands.core.retention import NoRetention
from mars_openhands.events import CpuTelemetry, EngineTelemetry, SessionEnded, ToolCancelled, ToolFinished, ToolStarted


class AlwaysPin(NoRetention):
    def pin_ttl(self, session, context_tokens, blocks, ctx):
        return PinOffer(10.0, value_density=float(blocks))


def pinning_policy(total_blocks=100, max_fraction=0.5) -> Policy:
    p = build_policy("fcfs", EngineShape(total_blocks, 16, 4))
    p.retention = AlwaysPin()
    p.max_pinned_fraction = max_fraction
    return p


def finish_turn(p: Policy, session: str, blocks: int, now: float):
    req = Request(f"{session}-{now}", session, now, 100)
    p.on_request_arrival(req, now)
    p.on_step([(req, 100)], [], now)
    d = p.on_request_finished(req, blocks, now + 1)
    if d.pin:
        p.record_pin(session, blocks, d.pin, now + 1)
    return d


def test_pin_is_recorded_and_released_on_resume_exactly_once():
    p = pinning_policy()
    assert finish_turn(p, "a", 10, 0.0).pin == PinOffer(10.0, 10.0)
    assert p.ctx.pins.total_blocks == 10
    p.on_request_arrival(Request("a2", "a", 5.0, 200), 5.0)
    pin = p.resume_pin("a")
    assert pin is not None and pin.blocks == 10
    assert p.resume_pin("a") is None and p.ctx.pins.total_blocks == 0


def test_pinned_memory_is_bounded():
    p = pinning_policy(total_blocks=100, max_fraction=0.3)
    assert finish_turn(p, "a", 20, 0.0).pin is not None
    assert finish_turn(p, "b", 20, 0.0).pin is None      # 40 > 30 blocks
    assert finish_turn(p, "c", 10, 0.0).pin is not None   # exactly 30
    assert p.ctx.pins.total_blocks == 30


def test_ttl_expiry_session_end_and_tool_cancel_release_pins():
    p = pinning_policy()
    for s in "abc":
        finish_turn(p, s, 5, 0.0)
    assert [x.session_id for x in p.on_event(ToolCancelled("a", 2.0))] == ["a"]
    assert [x.session_id for x in p.on_event(SessionEnded("b", 2.0))] == ["b"]
    assert "b" not in p.ctx.sessions and p.ctx.admitted_active == 2
    assert p.expired_pins(10.9) == [] and [x.session_id for x in p.expired_pins(11.0)] == ["c"]
    assert p.ctx.pins.total_blocks == 0 and len(p.ctx.pins) == 0


def test_cpu_plane_is_derived_from_tool_events_and_overridden_by_telemetry():
    p = pinning_policy()
    finish_turn(p, "a", 0, 0.0)
    p.on_event(ToolStarted("a", 1.0, "terminal", command="ls"))
    p.on_event(ToolStarted("x", 1.0, "terminal"))
    assert p.ctx.cpu.tools_in_flight == 2 and p.ctx.sessions["a"].in_tool is not None
    p.on_event(ToolFinished("a", 2.0, "terminal", 1.0, queue_wait_s=1.0))
    assert p.ctx.cpu.tools_in_flight == 1 and p.ctx.cpu.ema_queue_wait_s == pytest.approx(0.2)
    assert p.ctx.sessions["a"].in_tool is None
    p.on_event(CpuTelemetry(3.0, tools_in_flight=7, tool_workers=2, ema_queue_wait_s=4.0))
    assert (p.ctx.cpu.tools_in_flight, p.ctx.cpu.tool_workers, p.ctx.cpu.backlog) == (7, 2, 3.5)


def test_session_service_accumulates_and_prefill_rate_is_an_ema():
    p = pinning_policy()
    finish_turn(p, "a", 0, 0.0)
    finish_turn(p, "a", 0, 3.0)
    s = p.ctx.sessions["a"]
    assert (s.turns, s.turns_finished, s.service_tokens) == (2, 2, 200)
    p.ctx.prefill_tps = 1000.0
    p.observe_prefill(2000, 1.0)
    assert p.ctx.prefill_tps == pytest.approx(1200.0)


def test_unknown_policy_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        build_policy("nope", EngineShape(10, 16, 1))


def test_silent_sessions_give_their_window_slot_back_and_are_not_parked_when_they_return():
    p = build_policy("mars", EngineShape(10_000, 16, 2))          # window: 4 sessions
    backlog = []
    for i in range(6):
        assert p.on_request_arrival(Request(f"r{i}", f"s{i}", 0.0, 100), 0.0)
        backlog.append(p.ctx.sessions[f"s{i}"])
    chosen = p.admit(backlog, 0.0)
    assert len(chosen) == 4 and p.ctx.admitted_active == 4
    for s in chosen:                                              # calls finish, no events follow
        req = Request(f"{s.session_id}-done", s.session_id, 0.0, 100)
        p.on_request_finished(req, 0, 1.0)
    p.on_event(ToolStarted("s0", 1.0, "terminal"))                # s0's tool is known to run
    # tools queue (backlog 4.0): an engine with no call of the admitted is no liveness failure
    p.on_event(CpuTelemetry(1.0, tools_in_flight=8, tool_workers=2))
    assert p.admit(backlog[4:], 10.0) == []                       # not yet idle long enough
    assert [s.session_id for s in p.admit(backlog[4:], 31.2)] == ["s4", "s5"]
    assert not p.ctx.sessions["s1"].holds_slot and p.ctx.sessions["s0"].holds_slot
    assert p.on_request_arrival(Request("again", "s1", 40.0, 200), 40.0) is False   # never parked
    assert p.ctx.sessions["s1"].holds_slot and p.ctx.admitted_active == 4
    p.on_event(SessionEnded("s1", 41.0))
    assert p.ctx.admitted_active == 3
    p.release_idle(1.0 + p.idle.forget_after_s)                   # silent for an hour: forgotten
    assert set(p.ctx.sessions) == {"s4", "s5"} and p.ctx.admitted_active == 2


def test_sort_key_is_the_order_at_a_time():
    p = build_policy("mars", EngineShape(10_000, 16, 2))
    big = Request("big", "a", 0.0, 10_000)           # L2 by its uncached prefill
    small = Request("small", "b", 1.0, 100)          # L0
    for r in (big, small):
        p.on_request_arrival(r, r.arrival_s)
    assert p.order([big, small], 1.0) == [small, big]
    assert sorted([big, small], key=p.sort_key(1.0)) == [small, big]
    assert p.sort_key(61.0)(big) == (0, 0.0, 0.0)    # aged two levels in 60 s
    assert p.order([small, big], 61.0) == [big, small]
    big.cached_tokens = 9_000                        # a warm prefix: a short job
    assert p.sort_key(1.0)(big)[0] == 0


def test_chunk_tokens_caps_prefills_and_a_resumed_recompute_by_the_quantum():
    p = build_policy("mars", EngineShape(10_000, 16, 2))
    req = Request("r", "a", 0.0, 3000)
    p.on_request_arrival(req, 0.0)
    assert p.chunk_tokens(req, 8192) == 1024                          # L1 quantum
    assert p.chunk_tokens(req, 500) == 500                            # the step budget
    req.computed_tokens = req.prompt_tokens                           # past the prompt
    assert p.chunk_tokens(req, 8192) == 1                             # a decode
    assert p.chunk_tokens(req, 8192, remaining=1) == 1
    req.level = 0
    assert p.chunk_tokens(req, 8192, remaining=5000) == 2048          # recomputing its outputs: L0
    assert p.chunk_tokens(req, 300, remaining=5000) == 300
    fcfs = build_policy("fcfs", EngineShape(10_000, 16, 2))
    assert fcfs.chunk_tokens(req, 8192, remaining=5000) == 5000       # no quantum: the budget only


def test_the_tick_schedule_is_the_admission_interval():
    fcfs = build_policy("fcfs", EngineShape(10_000, 16, 2))
    assert fcfs.admission_interval_s is None and fcfs.admission_window is None
    p = build_policy("mars", EngineShape(10_000, 16, 2))
    assert p.admission_interval_s == 0.2 and p.next_tick_s == float("-inf")
    p.admit([], 5.0)
    assert p.next_tick_s == pytest.approx(5.2)
    p.admit([], 5.1)                                 # not due: the schedule stays
    assert p.next_tick_s == pytest.approx(5.2)
    p.admit([], 5.3)
    assert p.next_tick_s == pytest.approx(5.5) and p.admission_window == 4


def test_kv_telemetry_from_the_engine_or_an_event():
    p = pinning_policy(total_blocks=100)
    finish_turn(p, "a", 10, 0.0)
    p.observe_kv(60, waiting_demand_blocks=7)
    kv = p.ctx.kv
    assert (kv.free_blocks, kv.pinned_blocks, kv.waiting_demand_blocks) == (60, 10, 7)
    p.observe_prefill_start(2.5)                     # the latency EMA is the policy's own ...
    assert kv.prefill_start_latency_s == 0.0         # ... published at the top of the next step
    p.observe_kv(50)                                 # None keeps the last demand
    assert (kv.free_blocks, kv.waiting_demand_blocks) == (50, 7) and kv.prefill_start_latency_s == \
        pytest.approx(0.5)
    p.observe_prefill_start(1.5)
    p.observe_kv(50)
    assert kv.prefill_start_latency_s == pytest.approx(0.7)
    p.on_event(EngineTelemetry(2.0, total_blocks=200, free_blocks=150, pinned_blocks=3,
                               waiting_demand_blocks=9, prefill_start_latency_s=0.1))
    assert (kv.total_blocks, kv.free_blocks, kv.pinned_blocks, kv.waiting_demand_blocks, kv.block_size) == \
        (200, 150, 3, 9, 16) and kv.prefill_start_latency_s == 0.1


def test_release_all_pins_and_tool_hints():
    p = pinning_policy()
    for s in "ab":
        finish_turn(p, s, 5, 0.0)
    assert p.pinned_sessions == 2 and p.pin("a") is not None
    assert sorted(x.session_id for x in p.release_all_pins()) == ["a", "b"]
    assert p.pinned_sessions == 0 and p.ctx.pins.total_blocks == 0 and p.release_all_pins() == []
    hint = ToolStarted("a", 1.0, "terminal", command="pytest")
    assert p.hint_tool("a", hint) and p.session("a").in_tool is hint
    assert not p.hint_tool("a", ToolStarted("a", 1.0, "terminal"))   # one already known
    assert not p.hint_tool("nobody", hint) and p.session("nobody") is None
