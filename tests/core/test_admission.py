"""MARS external control plane: AIMD window with hysteresis, caps, and the load balancer."""
from __future__ import annotations

import pytest

from mars_openhands.core import EngineShape, Policy, PolicyConfig, Request, Session, build_policy
from mars_openhands.core.admission import AimdAdmission
from mars_openhands.core.aimd_config import AimdConfig
from mars_openhands.core.balancer import LoadBalancer, Pressure
from mars_openhands.core.boundaries import INFERRED_TOOL
from mars_openhands.core.context import PolicyContext
from mars_openhands.core.model import CpuState, KVState
from mars_openhands.events import CpuTelemetry, EngineTelemetry, ToolFinished, ToolStarted

PREVIEW = AimdConfig(w_init=30, w_max=30)     # the MARS preview's window


def ctx_with(workers: int = 8, in_flight: int = 0, wait: float = 0.0, total: int = 10_000,
             free: int = 10_000, demand: int = 0) -> PolicyContext:
    return PolicyContext(KVState(total, free, 16, waiting_demand_blocks=demand),
                         CpuState(workers, in_flight, wait))


def bind(a: AimdAdmission, ctx: PolicyContext, n: int = 200, prompt: int = 16) -> None:
    """Admit `n` small sessions into `a`'s working set, so that its session window binds."""
    for i in range(n):
        s = Session(f"bound{i}", 0.0, prompt, prompt_tokens=prompt, admitted=True, admitted_s=0.0,
                    holds_slot=True)
        ctx.sessions[s.session_id] = s
        a.working_set.add(s, ctx)


def test_window_decreases_by_0_7_under_cpu_overload_until_w_min():
    a, ctx = AimdAdmission(PREVIEW), ctx_with(workers=8, in_flight=16)      # backlog 2.0 -> overloaded
    windows = []
    for _ in range(7):
        a.tick(ctx)
        windows.append(a.window)
    assert windows == [21, 14, 9, 6, 4, 4, 4]
    assert a.pressure.cpu_overloaded and a.stats()["cpu_overloaded"]


def test_cpu_overload_hysteresis_enter_2_leave_1_and_wait_thresholds():
    a, ctx = AimdAdmission(PREVIEW), ctx_with(workers=10, in_flight=19)     # 1.9: not yet
    bind(a, ctx)
    a.tick(ctx)
    assert not a.pressure.cpu_overloaded and a.window == 30
    ctx.cpu.tools_in_flight = 20
    a.tick(ctx)
    assert a.pressure.cpu_overloaded and a.window == 21
    ctx.cpu.tools_in_flight = 15                                     # 1.5: still overloaded
    a.tick(ctx)
    assert a.pressure.cpu_overloaded and a.window == 14
    ctx.cpu.tools_in_flight, ctx.cpu.ema_queue_wait_s = 10, 2.5      # backlog ok, wait not yet
    a.tick(ctx)
    assert a.pressure.cpu_overloaded and a.window == 9
    ctx.cpu.ema_queue_wait_s = 2.0
    a.tick(ctx)
    assert not a.pressure.cpu_overloaded and a.window == 10          # healthy: +1
    ctx.cpu.tools_in_flight, ctx.cpu.ema_queue_wait_s = 10, 5.0      # long queue wait alone
    a.tick(ctx)
    assert a.pressure.cpu_overloaded and a.window == 7


def test_stale_queue_wait_with_an_idle_tool_worker_is_not_overload():
    """The wait EMA moves only when a tool call starts: once the queue drained and a worker is
    idle, a high last value must neither keep nor make the tool plane overloaded."""
    a, ctx = AimdAdmission(PREVIEW), ctx_with(workers=10, in_flight=20)
    bind(a, ctx)
    a.tick(ctx)
    assert a.pressure.cpu_overloaded and a.window == 21
    ctx.cpu.tools_in_flight, ctx.cpu.ema_queue_wait_s = 9, 30.0      # queue drained, EMA stale
    a.tick(ctx)
    assert not a.pressure.cpu_overloaded and a.pressure.cpu_healthy and a.window == 22
    ctx.cpu.tools_in_flight = 0                                      # all idle: no overload to enter
    a.tick(ctx)
    assert not a.pressure.cpu_overloaded
    ctx.cpu.tools_in_flight = 10                                     # all busy: the wait counts again
    a.tick(ctx)
    assert a.pressure.cpu_overloaded


def test_a_reported_queue_decides_whether_the_wait_is_stale_when_calls_take_several_cores():
    """Builds on two cores each: 6 calls fill 10 workers' cores and 3 more queue. Fewer calls than
    workers then does not mean nobody waits; where the host reports its queue, that decides."""
    a, ctx = AimdAdmission(PREVIEW), ctx_with(workers=10, in_flight=9, wait=30.0)
    bind(a, ctx)
    a.tick(ctx)
    assert not a.pressure.cpu_overloaded                             # no queue reported: calls < workers
    ctx.cpu.update(CpuTelemetry(1.0, tools_in_flight=9, tool_workers=10, ema_queue_wait_s=30.0,
                                tools_queued=3))
    a.tick(ctx)
    assert a.pressure.cpu_overloaded                                 # 3 calls wait: the wait counts
    ctx.cpu.update(CpuTelemetry(2.0, tools_in_flight=6, tool_workers=10, ema_queue_wait_s=30.0,
                                tools_queued=0))
    a.tick(ctx)
    assert not a.pressure.cpu_overloaded and a.pressure.cpu_healthy  # queue drained: the EMA is stale


def test_window_grows_by_one_only_when_cpu_healthy_kv_low_and_blocks_spare():
    a, ctx = AimdAdmission(AimdConfig(w_init=10, w_max=30)), ctx_with()
    bind(a, ctx)
    a.tick(ctx)
    assert a.window == 11
    ctx.cpu.tools_in_flight = 12                                     # backlog 1.5: not healthy
    a.tick(ctx)
    assert a.window == 11 and not a.pressure.cpu_overloaded
    ctx.cpu.tools_in_flight = 0
    ctx.kv.waiting_demand_blocks = 9_500                             # no spare block budget
    a.tick(ctx)
    assert a.window == 11
    ctx.kv.waiting_demand_blocks = 0
    for _ in range(40):
        a.tick(ctx)
    assert a.window == 30 and a.limit == 12                          # W_max; cpu_cap ceil(8 x 1.5)


def test_window_grows_only_while_it_binds_and_has_no_cap_unless_configured():
    a, ctx = AimdAdmission(AimdConfig()), ctx_with(workers=64)
    assert a.window == 4 and a.config.w_max is None                  # starts at W_min
    for _ in range(10):
        a.tick(ctx)
    assert a.window == 4                                             # nobody admitted: not binding
    bind(a, ctx, n=50)
    for _ in range(100):
        a.tick(ctx)
    assert a.window == 51                                            # one past the admitted count
    assert a.limit == 51 and a.cpu_cap == 96                         # ceil(64 x 1.5)


def test_cpu_cap_is_the_papers_midpoint_of_the_backlog_watermarks():
    a = AimdAdmission(AimdConfig())
    for workers, cap in ((4, 6), (3, 5), (2, 4), (64, 96)):      # never below W_min
        a.tick(ctx_with(workers=workers))
        assert a.cpu_cap == cap, workers


def test_cpu_cap_scales_with_the_measured_share_of_sessions_out_of_the_engine():
    a, ctx = AimdAdmission(AimdConfig()), ctx_with(workers=8)
    bind(a, ctx, n=10)
    for s in list(a.working_set.sessions.values())[:8]:
        s.turns = 1                                               # 8 of 10 have a call in the engine
    for _ in range(200):
        a.tick(ctx)
    assert a.tool_share == pytest.approx(0.2, abs=1e-3)
    assert a.cpu_cap == 60                                        # ceil(8 x 1.5 / 0.2)
    for s in a.working_set.sessions.values():
        s.turns = 0                                               # all in tools again
    for _ in range(400):
        a.tick(ctx)
    assert a.cpu_cap == 12                                        # the paper's cap


def test_kv_overload_hysteresis_enter_0_9_leave_0_85():
    a, ctx = AimdAdmission(PREVIEW), ctx_with(free=1000)                    # usage 0.9
    bind(a, ctx)
    a.tick(ctx)
    assert a.pressure.kv_overloaded and a.window == 21
    ctx.kv.free_blocks = 1400                                        # 0.86: still overloaded
    a.tick(ctx)
    assert a.pressure.kv_overloaded and a.window == 14
    ctx.kv.free_blocks = 1500                                        # 0.85: leaves
    a.tick(ctx)
    assert not a.pressure.kv_overloaded and a.window == 15
    ctx.kv.free_blocks = 1100                                        # 0.89: does not re-enter
    a.tick(ctx)
    assert not a.pressure.kv_overloaded and a.window == 15           # no growth above 0.85


def test_revocable_blocks_count_as_free_for_the_overload_flags_and_the_budget():
    a, ctx = AimdAdmission(PREVIEW), ctx_with(free=500)
    ctx.kv.pinned_blocks = 6000      # pins' own count: a prefix they share is in it several times
    ctx.kv.revocable_blocks = 4000   # 95 % used, 40 % of it only pinned
    a.tick(ctx)
    assert not a.pressure.kv_overloaded and a.pressure.kv_usage == pytest.approx(0.55)
    assert a.pressure.budget_blocks == 500 + 4000 - 1000


def test_parameters_are_constructor_arguments_and_validated():
    a = AimdAdmission(AimdConfig(w_min=2, w_init=8, w_max=8))
    a.tick(ctx_with(workers=8, in_flight=40))
    assert a.window == 5
    with pytest.raises(ValueError, match="w_min <= w_init <= w_max"):
        AimdConfig(w_min=5, w_init=3)
    with pytest.raises(ValueError, match="decrease"):
        AimdConfig(decrease=1.5)


# ---- load balancer -------------------------------------------------------------------------

def sessions(*sizes: int, start: float = 0.0) -> list[Session]:
    return [Session(f"s{i}", start + i, n, prompt_tokens=n) for i, n in enumerate(sizes)]


def ids(chosen) -> list[str]:
    return [s.session_id for s in chosen]


def test_fcfs_when_pressure_is_low_and_the_whole_backlog_fits():
    lb, ctx = LoadBalancer(), ctx_with()
    ctx.now = 5.0
    backlog = sessions(9000, 1000, 5000)
    assert ids(lb.select(backlog, 3, Pressure(budget_blocks=9000), ctx)) == ["s0", "s1", "s2"]
    assert lb.mode == "fcfs"
    # more sessions than slots: smallest first
    assert ids(lb.select(backlog, 2, Pressure(budget_blocks=9000), ctx)) == ["s1", "s2"]
    assert lb.mode == "smallest-first"


def test_cpu_overload_admits_largest_first_otherwise_smallest_first():
    lb, ctx = LoadBalancer(), ctx_with()
    backlog = sessions(3000, 9000, 1000, 40_000)           # size classes 1, 2, 0, 3
    hot = Pressure(cpu_overloaded=True, cpu_healthy=False, budget_blocks=9000)
    assert ids(lb.select(backlog, 2, hot, ctx)) == ["s3", "s1"] and lb.mode == "largest-first"
    kv = Pressure(kv_overloaded=True, kv_usage=0.9, budget_blocks=9000)
    assert ids(lb.select(backlog, 2, kv, ctx)) == ["s2", "s0"] and lb.mode == "smallest-first"


def test_sizes_are_compared_by_class_and_a_class_goes_in_arrival_order():
    lb, ctx = LoadBalancer(), ctx_with()
    backlog = sessions(1900, 1200, 1500, 5000)             # three of class 0 (<= 2048 tokens), one of 1
    kv = Pressure(kv_overloaded=True, kv_usage=0.9, budget_blocks=9000)
    assert ids(lb.select(backlog, 3, kv, ctx)) == ["s0", "s1", "s2"] and lb.mode == "smallest-first"
    hot = Pressure(cpu_overloaded=True, cpu_healthy=False, budget_blocks=9000)
    assert ids(lb.select(backlog, 2, hot, ctx)) == ["s3", "s0"] and lb.mode == "largest-first"


def test_the_size_classes_are_the_mlfq_level_bounds_it_is_given():
    lb, ctx = LoadBalancer(size_bounds=(1400,)), ctx_with()
    backlog = sessions(1900, 1200, 1500, 1300)             # classes 1, 0, 1, 0 with a 1,400-token bound
    kv = Pressure(kv_overloaded=True, kv_usage=0.9, budget_blocks=9000)
    assert ids(lb.select(backlog, 3, kv, ctx)) == ["s1", "s3", "s0"]


def test_every_admission_must_fit_the_kv_budget():
    lb, ctx = LoadBalancer(), ctx_with()
    backlog = sessions(16_000, 3200, 1600)                  # 1000, 200, 100 blocks
    assert ids(lb.select(backlog, 3, Pressure(budget_blocks=250), ctx)) == ["s2"]
    assert ids(lb.select(backlog, 3, Pressure(budget_blocks=0), ctx)) == []


def test_a_first_prefill_is_charged_only_the_blocks_the_prefix_cache_does_not_hold():
    """A system prompt other sessions share is held once: a new session whose prompt is mostly
    that prefix needs only its own blocks (at point A, 3-4 of a 13-block first prompt)."""
    lb, ctx = LoadBalancer(), ctx_with()
    cold, warm = sessions(1600, 1600)                        # 100 blocks each
    warm.prompt_hit_tokens = 1200                            # 75 of them cached (whole blocks)
    assert warm.prefill_blocks(16) == 25 and cold.prefill_blocks(16) == 100
    assert ids(lb.select([cold], 1, Pressure(budget_blocks=50), ctx)) == []
    assert ids(lb.select([warm], 1, Pressure(budget_blocks=50), ctx)) == ["s1"]


def test_long_sessions_wait_for_short_ones_kv_health_and_the_in_flight_cap():
    lb, ctx = LoadBalancer(), ctx_with(total=100_000, free=100_000)
    ok = Pressure(budget_blocks=90_000)
    ctx.now = 10.0
    backlog = [Session("short", 9.9, 1000, prompt_tokens=1000), Session("long1", 1.0, 60_000, prompt_tokens=60_000),
               Session("long2", 2.0, 60_000, prompt_tokens=60_000), Session("long3", 3.0, 60_000, prompt_tokens=60_000)]
    for s in backlog:
        ctx.sessions[s.session_id] = s
    # the short one waited only 0.1 s (< 0.2): long sessions may go, at most 2 in flight
    assert ids(lb.select(backlog, 4, ok, ctx)) == ["short", "long1", "long2"]
    assert lb.long_in_flight(ctx) == 2
    assert ids(lb.select(backlog[3:], 4, ok, ctx)) == []        # cap reached
    del ctx.sessions["long1"]                                    # that session ended
    assert ids(lb.select(backlog[3:], 4, Pressure(kv_overloaded=True, budget_blocks=90_000), ctx)) == []
    assert ids(lb.select(backlog[3:], 4, ok, ctx)) == ["long3"]


def test_long_session_is_held_back_while_a_short_one_has_waited_long_enough():
    lb, ctx = LoadBalancer(), ctx_with(total=100_000, free=100_000)
    ctx.now = 10.0
    # the short one waited 6 s
    backlog = [Session("long", 0.0, 60_000, prompt_tokens=60_000), Session("short", 4.0, 1000, prompt_tokens=1000)]
    assert lb.long_wait_threshold_s() == 5.0                     # no rate known: min(5, inf)
    assert ids(lb.select(backlog, 1, Pressure(budget_blocks=90_000), ctx)) == ["short"]
    assert ids(lb.select(backlog, 2, Pressure(budget_blocks=90_000), ctx)) == ["short"]
    assert lb.arrival_rate() == pytest.approx(0.25)              # 2 sessions 4 s apart
    assert lb.long_wait_threshold_s() == pytest.approx(4.0)


def test_an_overdue_long_session_goes_first_and_passes_the_short_wait_gate():
    """A long session that has waited the mean admission wait of new sessions is no longer held
    back by short ones (they would keep it out for as long as a backlog lasts)."""
    lb, ctx = LoadBalancer(), ctx_with(total=100_000, free=100_000)
    ok = Pressure(budget_blocks=90_000)
    assert lb.overdue_bar_s() == float("inf")                       # nothing admitted yet
    lb.admitted([Session("a", 0.0, 1000, prompt_tokens=1000), Session("b", 0.0, 1000, prompt_tokens=1000)], 20.0)
    assert lb.overdue_bar_s() == pytest.approx(20.0)
    ctx.now = 30.0
    backlog = [Session("long-old", 5.0, 60_000, prompt_tokens=60_000),       # waited 25 s >= 20
               Session("long-new", 15.0, 60_000, prompt_tokens=60_000),     # waited 15 s < 20
               Session("short", 20.0, 1000, prompt_tokens=1000)]            # waited 10 s (> 5 s gate)
    for s in backlog:
        ctx.sessions[s.session_id] = s
    assert ids(lb.select(backlog, 1, ok, ctx)) == ["long-old"]
    assert ids(lb.select(backlog, 3, ok, ctx)) == ["long-old", "short"]
    assert ids(lb.order(backlog, 1, ok, ctx.kv.blocks_for, ctx.now)) == ["long-old", "short", "long-new"]
    assert lb.mode == "smallest-first"
    # KV health and the in-flight cap still hold it back
    assert ids(lb.select(backlog, 3, Pressure(kv_overloaded=True, budget_blocks=90_000), ctx)) == ["short"]


def test_the_tail_bar_is_the_longest_of_the_latest_20_admission_waits():
    lb = LoadBalancer()
    lb.admitted([Session("early", 0.0, 1000, prompt_tokens=1000)], 500.0)   # a long wait, long ago
    for i in range(18):                                       # waits 1..18 s
        lb.admitted([Session(f"a{i}", 0.0, 1000, prompt_tokens=1000)], float(i + 1))
    assert lb.tail_bar_s() == float("inf")                   # too few waits to read a tail
    lb.admitted([Session("a18", 0.0, 1000, prompt_tokens=1000)], 19.0)
    assert lb.tail_bar_s() == pytest.approx(500.0)
    lb.admitted([Session("a19", 0.0, 1000, prompt_tokens=1000)], 20.0)
    assert lb.tail_bar_s() == pytest.approx(20.0)            # the early 500 s fell out of the window
    lb.admitted([Session("again", 5.0, 1000, prompt_tokens=1000, turns_finished=1)], 100.0)
    assert lb.tail_bar_s() == pytest.approx(20.0)            # a paused session's resume is no wait


# ---- through the Policy facade -------------------------------------------------------------

def mars(total: int = 10_000, workers: int = 2, **overrides) -> Policy:
    cfg = PolicyConfig().with_overrides({f"aimd.{k}": v for k, v in overrides.items()})
    return build_policy("mars", EngineShape(total_blocks=total, block_size=16, tool_workers=workers), cfg)


def arrive(p, sid: str, k: int, prompt: int, now: float) -> tuple[Request, bool]:
    req = Request(f"{sid}#{k}", sid, now, prompt, turn_index=k)
    return req, p.on_request_arrival(req, now)


def finish(p, req: Request, now: float, output: int = 100):
    req.computed_tokens, req.output_tokens = req.prompt_tokens, output
    return p.on_request_finished(req, 0, now)


def test_policy_parks_sessions_and_admits_within_the_window_every_0_2_s():
    p = mars(w_init=30, w_max=30)
    backlog = []
    for i in range(6):
        _, parked = arrive(p, f"s{i}", 0, 1000, 0.0)
        assert parked                                             # parked until admitted
        backlog.append(p.ctx.sessions[f"s{i}"])
    chosen = p.admit(backlog, 0.0)
    assert len(chosen) == 4 and p.ctx.admitted_active == 4        # cpu_cap = max(W_min, ceil(2 x 1.5))
    p.on_event(CpuTelemetry(0.1, tools_in_flight=8, tool_workers=2))
    p.on_event(EngineTelemetry(0.1, free_blocks=9000, total_blocks=10_000))
    assert p.admit([], 0.1) == []                                 # no tick before 0.2 s
    assert p.stats()["admission"]["cpu_overloaded"] is False
    p.admit([], 0.2)
    st = p.stats()["admission"]
    assert st["cpu_overloaded"] is True and st["window"] == 21
    assert build_policy("mars-no-admission", EngineShape(100, 16, 2)).on_request_arrival(
        Request("x", "x", 0.0, 10), 0.0) is False


def test_kv_window_admits_by_predicted_footprint_not_by_count():
    # 1,000 blocks of 16 tokens: 900 resident. Sessions of 4,000 tokens need 250 blocks each.
    p = mars(total=1000, w_init=50)
    backlog = []
    for i in range(6):
        arrive(p, f"s{i}", 0, 4000, 0.0)
        backlog.append(p.ctx.sessions[f"s{i}"])
    chosen = p.admit(backlog, 0.0)
    assert [s.session_id for s in chosen] == ["s0", "s1", "s2"]     # 3 x 250 <= 900 < 4 x 250
    st = p.stats()["admission"]
    assert st["kv_window_blocks"] == 900 and st["working_set_blocks"] == 750


def test_a_session_back_after_an_idle_release_counts_in_the_kv_window_again():
    """Behind a router without affinity a replica sees each session's calls rarely: they come
    back after their slot went idle. Uncounted, they filled the cache behind the KV window's back
    (4.6x slower than with affinity on 8 simulated replicas)."""
    p = mars(total=1000, w_init=50)
    reqs = {sid: arrive(p, sid, 0, 4000, 0.0)[0] for sid in ("s0", "s1", "s2")}
    p.admit([p.ctx.sessions[sid] for sid in reqs], 0.0)
    for req in reqs.values():                                     # calls finish, no events follow
        finish(p, req, 1.0)
    t = 1.0
    while p.ctx.admitted_active and t < 100:                      # silent: their slots go back
        t += 0.2
        p.admit([], t)
    assert t < 100 and p.stats()["admission"]["working_set_blocks"] == 0
    for sid in reqs:                                              # back, not parked
        assert arrive(p, sid, 1, 4200, t)[1] is False
    p.admit([], t + 0.2)
    st = p.stats()["admission"]
    assert st["working_set_blocks"] >= 3 * 4200 // 16             # their contexts count again
    assert p.admission.working_set.in_engine == 3                 # and so does their engagement


def test_a_roaming_session_in_a_known_tool_gives_its_slot_back_like_a_silent_one():
    """Behind a router without affinity a session's calls skip turn indices at each replica, and
    its events land anywhere: a tool_started here may see its tool_finished go elsewhere. Held
    for the hour a known tool may run, such slots choked 8 simulated round-robin replicas (MARS 7 %
    slower than FCFS; with the release, 6 % faster)."""
    p = mars(total=1000, w_init=50)
    reqs = {sid: arrive(p, sid, 0, 4000, 0.0)[0] for sid in ("home", "roams")}
    p.admit([p.ctx.sessions[sid] for sid in reqs], 0.0)
    for req in reqs.values():
        finish(p, req, 1.0)
    assert arrive(p, "roams", 3, 4200, 2.0)[1] is False           # turns 1 and 2 went elsewhere
    finish(p, Request("roams#3", "roams", 2.0, 4200, turn_index=3), 3.0)
    for sid in reqs:                                              # both start a tool, no end comes
        p.on_event(ToolStarted(sid, 3.0, "terminal", command="make"))
    assert [p.ctx.sessions[sid].roaming for sid in reqs] == [False, True]
    t = 3.0
    while t < 120:
        t += 0.2
        p.admit([], t)
    assert p.ctx.sessions["home"].holds_slot                      # its tool may well still run
    assert not p.ctx.sessions["roams"].holds_slot                 # its end may have gone elsewhere
    assert arrive(p, "roams", 4, 4400, t)[1] is False             # and it is back without waiting
    assert p.ctx.sessions["roams"].holds_slot


def test_a_session_that_started_on_another_replica_is_not_gated_again_here():
    """Its first call here is not its first call (turn index > 0): it was admitted where it
    started; parking it again would gate it once at every replica it touches."""
    p = mars(total=1000, w_init=4)
    for i in range(4):                                            # the window is full
        arrive(p, f"s{i}", 0, 4000, 0.0)
    p.admit([p.ctx.sessions[f"s{i}"] for i in range(4)], 0.0)
    assert arrive(p, "fresh", 0, 4000, 0.1)[1] is True           # a new session waits
    assert arrive(p, "moved", 5, 4000, 0.1)[1] is False          # one that moved does not
    assert "moved" in p.admission.working_set.sessions           # and counts against the limits


def test_kv_window_grows_as_the_admitted_sessions_leave_the_engine_for_tools():
    p = mars(total=1000, w_init=50)
    reqs = {}
    for i in range(6):
        reqs[f"s{i}"] = arrive(p, f"s{i}", 0, 4000, 0.0)[0]
    backlog = [p.ctx.sessions[f"s{i}"] for i in range(6)]
    p.admit(backlog, 0.0)
    for sid in ("s0", "s1", "s2"):                                # all three go to a tool, unpinned
        finish(p, reqs[sid], 1.0)
    t = 1.0
    while p.admit(backlog[3:], t) == [] and t < 60:
        t += 0.2
    assert t < 60 and p.stats()["admission"]["kv_window_blocks"] > 900


def test_new_sessions_wait_for_the_crest_of_a_wave_of_returns_to_pass_and_nobody_is_paused():
    """Returns from tools come in waves. The admit window follows the engaged share's rise at once
    (a session admitted into the trough is what the cache evicts at the crest); the pausing
    window follows its mean, so the admitted sessions keep their turns."""
    p = mars(total=1000, w_init=50, w_min=1)                         # the KV window alone
    reqs = {sid: arrive(p, sid, 0, 4000, 0.0)[0] for sid in ("s0", "s1", "s2")}
    p.admit([p.ctx.sessions[sid] for sid in reqs], 0.0)
    for req in reqs.values():                                     # all three go to a tool
        finish(p, req, 1.0)
    t = 1.0
    while p.stats()["admission"]["kv_window_blocks"] < 3000:      # the trough: both windows grow
        t += 0.2
        p.admit([], t)
    assert p.stats()["admission"]["kv_admit_window_blocks"] == pytest.approx(
        p.stats()["admission"]["kv_window_blocks"])
    for sid in reqs:                                              # the wave: all three come back
        assert arrive(p, sid, 1, 4200, t)[1] is False
    arrive(p, "new", 0, 4000, t)
    t += 0.2
    assert p.admit([p.ctx.sessions["new"]], t) == []              # 3 x 263 + 250 > 900
    st = p.stats()["admission"]
    assert st["kv_admit_window_blocks"] == pytest.approx(900)     # at the crest's share, 1
    assert st["kv_window_blocks"] > 2000 and st["suspended"] == 0   # the mean barely moved


def test_kv_window_suspends_the_youngest_at_their_turn_boundary_when_contexts_outgrow_it():
    p = mars(total=1000, workers=4, w_init=50, w_min=1)              # the KV window alone
    reqs = {f"s{i}": arrive(p, f"s{i}", 0, 1600, float(i))[0] for i in range(4)}
    p.admit([p.ctx.sessions[sid] for sid in reqs], 4.0)              # 4 x 100 blocks: all fit
    assert p.ctx.admitted_active == 4
    for sid in reqs:                                                  # contexts grow to 4,800 tokens
        finish(p, reqs[sid], 5.0, output=3200)
        reqs[sid], parked = arrive(p, sid, 1, 4800, 5.0)
        assert not parked
    p.admit([], 5.2)                                                  # tick: 4 x 300 > 900
    for sid in reversed(list(reqs)):                                  # youngest first
        finish(p, reqs[sid], 6.0)
    assert p.stats()["admission"]["suspended"] == 1
    assert not p.ctx.sessions["s3"].admitted and p.ctx.sessions["s0"].admitted
    _, parked = arrive(p, "s3", 2, 5000, 7.0)
    assert parked and p.ctx.admitted_active == 3                     # its next call waits outside


def test_suspended_sessions_resume_before_new_ones():
    lb, ctx = LoadBalancer(), ctx_with()
    new = Session("new", 0.0, 100, prompt_tokens=100)
    old = Session("old", 5.0, 100, prompt_tokens=9000, turns=3, turns_finished=2)
    assert ids(lb.select([new, old], 1, Pressure(budget_blocks=9000), ctx)) == ["old"]


def test_without_pressure_awareness_the_backlog_goes_in_arrival_order_and_no_session_is_long():
    """`mars-no-balancer`: paused sessions first, then arrival order, whatever the pressure; a
    60k-token first prompt is not held behind short ones."""
    lb, ctx = LoadBalancer(pressure_aware=False), ctx_with(total=100_000, free=100_000)
    ctx.now = 10.0
    backlog = sessions(9000, 60_000, 1000, 5000) + [
        Session("paused", 8.0, 100, prompt_tokens=2000, turns=3, turns_finished=2)]
    for hot in (Pressure(cpu_overloaded=True, cpu_healthy=False, budget_blocks=90_000),
                Pressure(kv_usage=0.88, budget_blocks=90_000)):
        assert ids(lb.select(backlog, 3, hot, ctx)) == ["paused", "s0", "s1"] and lb.mode == "fcfs"
    assert not lb.is_long(backlog[1]) and LoadBalancer().is_long(backlog[1])
    # the KV budget still binds, in arrival order (no size order to end the pass early)
    assert ids(lb.select(backlog, 5, Pressure(budget_blocks=800), ctx)) == ["paused", "s0", "s2"]


def test_an_idle_engine_admits_the_head_within_one_control_period_whatever_the_windows():
    p = mars(total=1000, w_init=4)
    req, _ = arrive(p, "big", 0, 20_000, 0.0)                        # larger than the whole cache
    s = p.ctx.sessions["big"]
    assert p.admit([s], 0.0) == [s]                                   # fits no window; engine idle
    assert p.stats()["admission"]["idle_admits"] == 1
    # a second one waits while the first is in the engine
    arrive(p, "next", 0, 20_000, 0.3)
    s2 = p.ctx.sessions["next"]
    assert p.admit([s2], 0.4) == [] and p.admit([s2], 0.6) == []
    finish(p, req, 0.7)                                               # first one goes to a tool
    assert p.admit([s2], 0.8) == [s2]


def test_an_idle_engine_is_held_for_overloaded_tools_only_while_they_stay_the_bottleneck():
    """Overloaded tools hold the backlog from an idle engine only if the tool plane was full most
    of the last seconds: a burst into a plane whose workers idled before does not."""
    cfg = AimdConfig(w_init=4, w_max=4)
    backlog = [Session("new", 0.0, 100, prompt_tokens=100)]
    for idle_before, held in ((True, False), (False, True)):
        a, ctx = AimdAdmission(cfg), ctx_with(workers=2, in_flight=0 if idle_before else 4)
        bind(a, ctx, n=4)                            # the window is full, none of them in the engine
        for _ in range(50):                          # 10 s: the workers idle, or busy with a queue
            a.tick(ctx)
        ctx.cpu.tools_in_flight = 4                  # 4 calls on 2 workers: overloaded either way
        a.tick(ctx)
        assert a.pressure.cpu_overloaded and a.tools_bottleneck is held
        assert (a.liveness_bound_s(ctx) is None) is held
        assert ids(a.select(backlog, ctx)) == ([] if held else ["new"])


def test_a_sessionless_call_gives_its_slot_back_when_it_finishes():
    p = mars(w_init=4, w_max=4)
    backlog, reqs = [], []
    for i in range(8):
        req = Request(f"r{i}", f"r{i}", 0.0, 100, sessionless=True)
        assert p.on_request_arrival(req, 0.0)
        reqs.append(req)
        backlog.append(p.ctx.sessions[f"r{i}"])
    assert len(p.admit(backlog, 0.0)) == 4
    for req in reqs[:4]:
        finish(p, req, 0.1)
    assert p.ctx.admitted_active == 0 and "r0" not in p.ctx.sessions
    assert len(p.admit(backlog[4:], 0.2)) == 4                        # at the next tick, not 30 s later


def test_turn_growth_is_measured_from_arrivals_and_condensation_counts_as_zero():
    p = mars()
    req, _ = arrive(p, "s", 0, 1000, 0.0)
    p.admit([p.ctx.sessions["s"]], 0.0)
    finish(p, req, 1.0, output=200)                                   # context 1,200
    req, _ = arrive(p, "s", 1, 2200, 2.0)                             # grew by 1,000
    assert p.ctx.turn_growth_tokens == pytest.approx(200.0)           # EMA 0.2 from 0
    finish(p, req, 3.0, output=0)
    arrive(p, "s", 2, 500, 4.0)                                       # condensed
    assert p.ctx.turn_growth_tokens == pytest.approx(160.0)


def test_an_overloaded_tool_plane_pauses_the_youngest_sessions_beyond_cpu_cap():
    p = mars(total=100_000, workers=2, w_init=8)
    adm = p.admission
    adm.tool_share = 0.25                      # measured so far: sessions mostly in the engine
    reqs = {f"s{i}": arrive(p, f"s{i}", 0, 160, float(i))[0] for i in range(6)}
    p.admit([p.ctx.sessions[sid] for sid in reqs], 6.0)
    assert p.ctx.admitted_active == 6 and adm.cpu_cap == 11      # ceil(2 x 1.5 / 0.2875)
    for sid in reqs:                                              # all six go to their tools...
        finish(p, reqs[sid], 6.1)
    p.on_event(CpuTelemetry(6.1, tools_in_flight=6, tool_workers=2))   # ...which queue: backlog 3
    t = 6.2
    while adm.cpu_cap > 4:                                        # the share of sessions out of
        p.admit([], t)                                            # the engine climbs to 1
        t += 0.2
    assert adm.stats()["suspended"] == 0                          # nobody at a boundary yet
    reqs = {sid: arrive(p, sid, 1, 400, t)[0] for sid in reqs}
    for sid in reqs:
        finish(p, reqs[sid], t + 0.1)
    assert adm.stats()["suspended"] == 2                          # 6 admitted, cpu_cap 4
    assert [sid for sid in reqs if not p.ctx.sessions[sid].admitted] == ["s4", "s5"]   # youngest


def test_a_full_host_of_multi_core_calls_is_measured_in_the_calls_it_runs():
    """64 workers running 16 four-core builds with 16 more queued: backlog is 2 (overloaded), not
    0.5, and cpu_cap follows the 16 calls the host runs, not its 64 workers."""
    a, ctx = AimdAdmission(AimdConfig()), ctx_with(workers=64)
    ctx.cpu.update(CpuTelemetry(0.0, tools_in_flight=32, tool_workers=64, ema_queue_wait_s=0.0, tools_queued=16))
    assert ctx.cpu.backlog == pytest.approx(2.0)
    for _ in range(400):
        a.tick(ctx)
    assert a.pressure.cpu_overloaded
    assert a.host_runs == pytest.approx(16.0) and a.cpu_cap == 24          # ceil(16 x 1.5 / 1.0)
    ctx.cpu.update(CpuTelemetry(1.0, tools_in_flight=10, tool_workers=64, ema_queue_wait_s=0.0,
                                tools_queued=0))                           # the queue drained:
    assert ctx.cpu.backlog == pytest.approx(10 / 64)                       # per worker again
    a.tick(ctx)
    assert a.host_runs == pytest.approx(16.0)                              # what it ran when full


def test_sessions_between_a_tool_and_their_next_call_load_neither_plane():
    """On the engine a turn's hops (the reply to the agent, the tool's finish to the next call),
    read as tool time, put the share at 0.68-0.88 against 0.31-0.60 in the simulators, and the cap
    paused sessions the host had room for."""
    a, ctx = AimdAdmission(AimdConfig()), ctx_with(workers=8)
    bind(a, ctx, n=10)
    group = list(a.working_set.sessions.values())
    for s in group[:2]:
        s.turns = 1                                               # in the engine
    for s in group[2:4]:
        s.reports_tools, s.in_tool = True, ToolStarted(session_id=s.session_id, t=0.0, tool_name="bash")
    for s in group[4:]:
        s.reports_tools = True                                    # its tool ended, no call yet
    for _ in range(200):
        a.tick(ctx)
    assert a.tool_share == pytest.approx(0.5, abs=1e-3)           # 2 in tools of 4 on a plane
    assert a.cpu_cap == 24                                        # ceil(8 x 1.5 / 0.5); was 15
    for s in group[4:]:
        s.reports_tools = False                                   # sends no events: out is a tool
    for _ in range(400):
        a.tick(ctx)
    assert a.tool_share == pytest.approx(0.8, abs=1e-3)


def test_a_sessions_own_tool_events_mark_it_as_reporting_its_tools():
    p = mars()
    req, _ = arrive(p, "s", 0, 1000, 0.0)
    p.admit([p.ctx.sessions["s"]], 0.0)
    finish(p, req, 1.0)
    s = p.ctx.sessions["s"]
    assert not s.reports_tools                                    # between calls, as far as known
    p.on_event(ToolStarted(session_id="s", t=1.1, tool_name="bash"))
    assert s.reports_tools and s.in_tool is not None
    p.on_event(ToolFinished(session_id="s", t=1.5, tool_name="bash", duration_s=0.4))
    assert s.reports_tools and s.in_tool is None                  # on neither plane until it calls
    quiet, _ = arrive(p, "n", 0, 1000, 2.0)                      # an agent that sends no events
    p.admit([p.ctx.sessions["n"]], 2.0)
    finish(p, quiet, 3.0)
    p.on_event(ToolStarted(session_id="n", t=3.0, tool_name=INFERRED_TOOL))   # the engine's guess
    n = p.ctx.sessions["n"]
    assert n.in_tool is not None and not n.reports_tools


def test_a_tool_event_between_two_telemetries_does_not_move_the_calls_the_host_runs():
    """2 workers run 2 calls, 1 queues. One ends and its finish reaches the engine before the next
    telemetry: events count 2 in flight, the last telemetry 1 queued. The host still runs 2 (the
    queued call took the freed worker): read as 1, the backlog was 2.0 and the host overloaded."""
    p = mars(total=10_000, workers=2)
    p.on_event(CpuTelemetry(0.0, tools_in_flight=3, tool_workers=2, ema_queue_wait_s=0.0, tools_queued=1))
    for sid in ("a", "b", "c"):
        p.on_event(ToolStarted(session_id=sid, t=0.0, tool_name="bash"))
    p.on_event(CpuTelemetry(0.0, tools_in_flight=3, tool_workers=2, ema_queue_wait_s=0.0, tools_queued=1))
    p.on_event(ToolFinished(session_id="a", t=1.0, tool_name="bash", duration_s=1.0))
    cpu = p.ctx.cpu
    assert cpu.tools_in_flight == 2 and cpu.full_runs == 2 and cpu.backlog == pytest.approx(1.0)


def test_one_core_calls_read_the_same_as_workers():
    ctx = ctx_with(workers=8)
    ctx.cpu.update(CpuTelemetry(0.0, tools_in_flight=16, tool_workers=8, ema_queue_wait_s=0.0,
                                tools_queued=8))                           # 8 run, 8 queue
    assert ctx.cpu.backlog == pytest.approx(16 / 8)
    a = AimdAdmission(AimdConfig())
    a.tick(ctx)
    assert a.host_runs == 8 and a.cpu_cap == 12                            # the paper's cap


def test_an_overdue_session_passes_the_tool_planes_cap_once_a_tick_within_the_kv_limits():
    """The tool plane's cap held the first burst's sessions for 320 s while every later one went
    by (bursty-cpu / 64 / ample / overloaded, p95 0.94x ThunderAgent's on one seed)."""
    p = mars(total=10_000, w_init=50)                         # cpu_cap = max(4, 2 x 1.5) = 4 < W
    for i in range(4):                                        # the cap is full
        arrive(p, f"in{i}", 0, 1000, 0.0)
    p.admit([p.ctx.sessions[f"in{i}"] for i in range(4)], 0.0)
    assert p.stats()["admission"]["cpu_cap"] == 4 and p.ctx.admitted_active == 4
    lb = p.admission.balancer
    for i in range(20):                                       # the latest admissions waited 10 s
        lb.admitted([Session(f"w{i}", 0.0, 1000, prompt_tokens=1000)], 10.0)
    arrive(p, "old", 0, 1000, 1.0)
    arrive(p, "older", 0, 1000, 0.5)
    backlog = [p.ctx.sessions["older"], p.ctx.sessions["old"]]
    assert p.admit(backlog, 10.2) == []                       # waited 9.7 s: not yet overdue
    assert ids(p.admit(backlog, 10.6)) == ["older"]           # 10.1 s: past the bar, past the cap
    assert p.admit(backlog[1:], 10.7) == []                   # one a tick
    assert p.admit(backlog[1:], 11.0) == []                   # 10.0 s: the bar is now older's 10.1 s
    assert ids(p.admit(backlog[1:], 11.2)) == ["old"]
    st = p.stats()["admission"]
    assert st["overdue_admits"] == 2 and p.ctx.admitted_active == 6
    big = Session("big", 0.0, 200_000, prompt_tokens=200_000)  # 12,500 blocks: never past the KV limits
    p.ctx.sessions["big"] = big
    t = 11.2
    while t < 20:
        t += 0.2
        assert p.admit([big], t) == []


def test_an_overdue_session_does_not_pass_the_session_window():
    """W is the paper's response to measured overload; only the tool plane's estimate is passed."""
    p = mars(total=10_000, w_init=4, w_max=4)                 # W = cpu_cap = 4
    for i in range(4):
        arrive(p, f"in{i}", 0, 1000, 0.0)
    p.admit([p.ctx.sessions[f"in{i}"] for i in range(4)], 0.0)
    for i in range(20):
        p.admission.balancer.admitted([Session(f"w{i}", 0.0, 1000, prompt_tokens=1000)], 1.0)
    arrive(p, "old", 0, 1000, 0.5)
    t = 0.0
    while t < 10:
        t += 0.2
        assert p.admit([p.ctx.sessions["old"]], t) == []
    assert p.stats()["admission"]["overdue_admits"] == 0
