"""MARS external control plane: AIMD window with hysteresis, caps, and the load balancer."""
from __future__ import annotations

import pytest

from mars_openhands.core import EngineShape, PolicyConfig, Request, Session, build_policy
from mars_openhands.core.admission import AimdAdmission, AimdConfig, LoadBalancer, Pressure
from mars_openhands.core.context import PolicyContext
from mars_openhands.core.model import CpuState, KVState
from mars_openhands.events import CpuTelemetry, EngineTelemetry


PREVIEW = AimdConfig(w_init=30, w_max=30)     # the MARS preview's window


def ctx_with(workers: int = 8, in_flight: int = 0, wait: float = 0.0, total: int = 10_000,
             free: int = 10_000, demand: int = 0) -> PolicyContext:
    return PolicyContext(KVState(total, free, 16, waiting_demand_blocks=demand),
                         CpuState(workers, in_flight, wait))


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
    ctx.cpu.tools_in_flight, ctx.cpu.ema_queue_wait_s = 0, 5.0       # long queue wait alone
    a.tick(ctx)
    assert a.pressure.cpu_overloaded and a.window == 7


def test_window_grows_by_one_only_when_cpu_healthy_kv_low_and_blocks_spare():
    a, ctx = AimdAdmission(AimdConfig(w_init=10, w_max=30)), ctx_with()
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
    assert a.window == 30                                            # capped at W_max


def test_kv_overload_hysteresis_enter_0_9_leave_0_85():
    a, ctx = AimdAdmission(PREVIEW), ctx_with(free=1000)                    # usage 0.9
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


def test_caps_cpu_from_workers_and_kv_linear_between_0_85_and_0_9():
    a = AimdAdmission(PREVIEW)
    a.tick(ctx_with(workers=4))
    assert a.cpu_cap == 6 and a.limit == 6                           # ceil(4 x 1.5)
    a.tick(ctx_with(workers=3))
    assert a.cpu_cap == 5                                            # ceil(4.5)
    for free, cap in ((1500, 30), (1250, 17), (1000, 4), (500, 4)):
        a.tick(ctx_with(workers=64, free=free))
        assert a.kv_cap == cap, (free, cap)
    assert a.limit == min(a.window, a.cpu_cap, a.kv_cap)


def test_parameters_are_constructor_arguments_and_validated():
    a = AimdAdmission(AimdConfig(w_min=2, w_init=8, w_max=8))
    a.tick(ctx_with(workers=8, in_flight=40))
    assert a.window == 5
    with pytest.raises(ValueError, match="w_min <= w_init <= w_max"):
        AimdConfig(w_min=5, w_init=3)
    with pytest.raises(ValueError, match="decrease"):
        AimdConfig(decrease=1.5)


def test_unset_window_is_sized_from_the_tool_plane():
    assert AimdConfig().sized(64) == AimdConfig(w_init=64, w_max=64)          # ceil(64 x 1.0)
    assert AimdConfig().sized(2).w_max == 4                                    # never below W_min
    assert AimdConfig(w_init=10).sized(64) == AimdConfig(w_init=10, w_max=64)
    assert AimdConfig(w_max=8, w_init=8).sized(64).w_max == 8                  # explicit wins
    with pytest.raises(ValueError, match="size the window"):
        AimdAdmission(AimdConfig())
    policy = build_policy("mars", EngineShape(1000, 16, 64))
    assert policy.admission.config.w_max == 64 and policy.max_active == 64


# ---- load balancer -------------------------------------------------------------------------

def sessions(*sizes: int, start: float = 0.0) -> list[Session]:
    return [Session(f"s{i}", start + i, n) for i, n in enumerate(sizes)]


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
    backlog = sessions(3000, 9000, 1000, 6000)
    hot = Pressure(cpu_overloaded=True, cpu_healthy=False, budget_blocks=9000)
    assert ids(lb.select(backlog, 2, hot, ctx)) == ["s1", "s3"] and lb.mode == "largest-first"
    kv = Pressure(kv_overloaded=True, kv_usage=0.9, budget_blocks=9000)
    assert ids(lb.select(backlog, 2, kv, ctx)) == ["s2", "s0"] and lb.mode == "smallest-first"


def test_every_admission_must_fit_the_kv_budget():
    lb, ctx = LoadBalancer(), ctx_with()
    ctx.admitted_active = 1
    backlog = sessions(16_000, 3200, 1600)                  # 1000, 200, 100 blocks
    assert ids(lb.select(backlog, 3, Pressure(budget_blocks=250), ctx)) == ["s2"]
    assert ids(lb.select(backlog, 3, Pressure(budget_blocks=0), ctx)) == []


def test_an_idle_engine_admits_the_head_even_if_it_exceeds_the_budget():
    lb, ctx = LoadBalancer(), ctx_with()
    assert ids(lb.select(sessions(200_000), 3, Pressure(budget_blocks=10), ctx)) == ["s0"]


def test_long_sessions_wait_for_short_ones_kv_health_and_the_in_flight_cap():
    lb, ctx = LoadBalancer(), ctx_with(total=100_000, free=100_000)
    ok = Pressure(budget_blocks=90_000)
    ctx.now = 10.0
    backlog = [Session("short", 9.9, 1000), Session("long1", 1.0, 60_000), Session("long2", 2.0, 60_000),
               Session("long3", 3.0, 60_000)]
    for s in backlog:
        ctx.sessions[s.session_id] = s
    # the short one waited only 0.1 s (< 0.2): long sessions may go, at most 2 in flight
    assert ids(lb.select(backlog, 4, ok, ctx)) == ["short", "long1", "long2"]
    assert lb.long_in_flight(ctx) == 2
    ctx.admitted_active = 3
    assert ids(lb.select(backlog[3:], 4, ok, ctx)) == []        # cap reached
    del ctx.sessions["long1"]                                    # that session ended
    assert ids(lb.select(backlog[3:], 4, Pressure(kv_overloaded=True, budget_blocks=90_000), ctx)) == []
    assert ids(lb.select(backlog[3:], 4, ok, ctx)) == ["long3"]


def test_long_session_is_held_back_while_a_short_one_has_waited_long_enough():
    lb, ctx = LoadBalancer(), ctx_with(total=100_000, free=100_000)
    ctx.now = 10.0
    backlog = [Session("long", 0.0, 60_000), Session("short", 4.0, 1000)]  # short waited 6 s
    assert lb.long_wait_threshold_s() == 5.0                     # no rate known: min(5, inf)
    assert ids(lb.select(backlog, 1, Pressure(budget_blocks=90_000), ctx)) == ["short"]
    assert ids(lb.select(backlog, 2, Pressure(budget_blocks=90_000), ctx)) == ["short"]
    assert lb.arrival_rate() == pytest.approx(0.25)              # 2 sessions 4 s apart
    assert lb.long_wait_threshold_s() == pytest.approx(4.0)


# ---- through the Policy facade -------------------------------------------------------------

def test_policy_parks_sessions_and_admits_within_the_window_every_0_2_s():
    preview = PolicyConfig().with_overrides({"aimd.w_max": 30, "aimd.w_init": 30})
    p = build_policy("mars", EngineShape(total_blocks=10_000, block_size=16, tool_workers=2), preview)
    backlog = []
    for i in range(6):
        req = Request(f"r{i}", f"s{i}", 0.0, 1000)
        assert p.on_request_arrival(req, 0.0) is True            # parked until admitted
        backlog.append(p.ctx.sessions[f"s{i}"])
    chosen = p.admit(backlog, 0.0)
    assert len(chosen) == 4 and p.ctx.admitted_active == 4        # cpu_cap = max(W_min, ceil(2 x 1.5))
    assert p.stats()["admission"]["limit"] == 4
    p.on_event(CpuTelemetry(0.1, tools_in_flight=8, tool_workers=2))
    p.on_event(EngineTelemetry(0.1, free_blocks=9000, total_blocks=10_000))
    assert p.admit(backlog[3:], 0.1) == []                        # no tick before 0.2 s
    assert p.stats()["admission"]["cpu_overloaded"] is False
    p.admit(backlog[3:], 0.2)
    st = p.stats()["admission"]
    assert st["cpu_overloaded"] is True and st["window"] == 21
    assert build_policy("mars-no-admission", EngineShape(100, 16, 2)).on_request_arrival(
        Request("x", "x", 0.0, 10), 0.0) is False
