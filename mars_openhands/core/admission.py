"""MARS' external control plane: an AIMD admission window and a pressure-aware load balancer.

Every `interval_s` (0.2 s) `tick()` reads the CPU plane (tool backlog = in flight / workers, EMA
of tool queue wait) and the GPU plane (KV usage), moves two hysteresis flags and the window W:

    CPU overloaded: enter backlog >= 2.0 or EMA wait >= 5 s; leave backlog <= 1.0 and wait <= 2 s
    KV overloaded:  enter usage >= 0.9; leave usage <= 0.85
    any overload                                         -> W = max(W_min, floor(0.7 W))
    CPU healthy, usage <= 0.85, spare KV block budget    -> W = min(W_max, W + 1)
    limit = min(W, cpu_cap = ceil(workers x (1.0 + 2.0) / 2), kv_cap)

kv_cap falls linearly from W_max at usage 0.85 to W_min at 0.9. `select()` then admits up to
limit - admitted sessions from the backlog in the order `LoadBalancer` picks. Constants are the
MARS paper / preview defaults (docs/policies.md "Admission (AIMD window)"); all are `AimdConfig` fields.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

from mars_openhands.core.context import PolicyContext
from mars_openhands.core.model import Session
from mars_openhands.core.strategies import Admission


@dataclass(frozen=True, slots=True)
class AimdConfig:
    interval_s: float = 0.2
    w_min: int = 4
    #: None: sized from the tool plane (see `sized`); the preview uses 30 / 30.
    w_init: int | None = None
    w_max: int | None = None
    increase: int = 1
    decrease: float = 0.7
    cpu_backlog_high: float = 2.0
    cpu_backlog_low: float = 1.0
    cpu_wait_high_s: float = 5.0
    cpu_wait_low_s: float = 2.0
    kv_high: float = 0.9            # also the KV target: the admission budget keeps 10 % free
    kv_low: float = 0.85
    long_prefill_tokens: int = 50_000
    max_long_inflight: int = 2

    def sized(self, tool_workers: int) -> "AimdConfig":
        """Fill an unset W_max with ceil(workers x cpu_backlog_low) and W_init with W_max.

        An admitted session has at most one tool call in flight, so a window of workers x low
        sessions can never by itself push the tool backlog past the healthy watermark. A fixed
        W_max (the preview's 30) ignores the host: on 64 tool workers it starves the engine, and
        cpu_cap (1.5 x workers) admits more sessions than the KV cache holds once their contexts
        grow under sustained overload (measured in the simulator, README "Simulator results").
        """
        cap = math.ceil(max(1, tool_workers) * self.cpu_backlog_low)
        w_max = self.w_max if self.w_max is not None else max(self.w_min, cap, self.w_init or 0)
        return dataclasses.replace(self, w_max=w_max, w_init=self.w_init if self.w_init is not None else w_max)

    def __post_init__(self) -> None:
        checks = [
            ("w_min <= w_init <= w_max", 1 <= self.w_min <= (self.w_init or self.w_min)
             <= (self.w_max or self.w_init or self.w_min)),
            ("0 < decrease < 1", 0.0 < self.decrease < 1.0),
            ("increase >= 1", self.increase >= 1),
            ("interval_s > 0", self.interval_s > 0),
            ("cpu_backlog_low <= cpu_backlog_high", 0 <= self.cpu_backlog_low <= self.cpu_backlog_high),
            ("cpu_wait_low_s <= cpu_wait_high_s", 0 <= self.cpu_wait_low_s <= self.cpu_wait_high_s),
            ("kv_low < kv_high <= 1", 0 <= self.kv_low < self.kv_high <= 1.0),
            ("long_prefill_tokens > 0", self.long_prefill_tokens > 0),
            ("max_long_inflight >= 0", self.max_long_inflight >= 0),
        ]
        for what, ok in checks:
            if not ok:
                raise ValueError(f"AimdConfig: need {what}; got {self}")


@dataclass(slots=True)
class Pressure:
    """What the control loop concluded at its last tick; the load balancer reads it."""

    cpu_overloaded: bool = False
    kv_overloaded: bool = False
    cpu_healthy: bool = True
    kv_usage: float = 0.0
    budget_blocks: int = 0        # free blocks above the 10 % reserve, minus queued demand


class LoadBalancer:
    """Order of admission from the backlog (docs/policies.md "Load balancer").

    - FCFS when pressure is low (no overload, CPU healthy, usage <= 0.85) and the whole backlog
      fits the free slots and the KV budget;
    - CPU overloaded: largest estimated first prefill first (GPU-heavy sessions add no tool load);
    - otherwise (normal or KV pressure): smallest first prefill first.
    Every admission must fit the KV budget (blocks of its first prefill). A "long" session (first
    prefill > 50k tokens) is admitted only when no short session in the backlog has waited
    >= max(0.2, min(5, 1 / arrival rate)) s, KV is not overloaded and fewer than 2 long sessions
    are in flight. If nothing is admitted and no session is, the head is admitted anyway, so that
    a session bigger than the budget cannot wedge an idle engine.
    """

    def __init__(self, config: AimdConfig = AimdConfig()) -> None:
        self.config = config
        self.mode = "idle"
        self.long_sessions: set[str] = set()
        self._at_last: set[str] = set()     # sessions counted at the latest arrival time
        self._arrivals = 0
        self._first_arrival = math.inf
        self._last_arrival = -math.inf

    def is_long(self, s: Session) -> bool:
        return s.first_prompt_tokens > self.config.long_prefill_tokens

    def arrival_rate(self) -> float | None:
        """Sessions per second seen so far (None until two arrivals span some time)."""
        span = self._last_arrival - self._first_arrival
        return (self._arrivals - 1) / span if self._arrivals >= 2 and span > 0 else None

    def long_wait_threshold_s(self) -> float:
        rate = self.arrival_rate()
        return max(0.2, min(5.0, 1.0 / rate if rate else math.inf))

    def long_in_flight(self, ctx: PolicyContext) -> int:
        self.long_sessions = {sid for sid in self.long_sessions
                               if sid in ctx.sessions and not ctx.sessions[sid].ended}
        return len(self.long_sessions)

    def _count_arrivals(self, backlog: Sequence[Session]) -> None:
        """Count sessions new to the backlog: they join at its end, so scan back to the last seen."""
        new = []
        for s in reversed(backlog):
            if s.first_arrival_s < self._last_arrival:
                break
            if s.first_arrival_s > self._last_arrival or s.session_id not in self._at_last:
                new.append(s)
        for s in reversed(new):
            if s.first_arrival_s > self._last_arrival:
                self._last_arrival, self._at_last = s.first_arrival_s, set()
            self._at_last.add(s.session_id)
            self._arrivals += 1
            self._first_arrival = min(self._first_arrival, s.first_arrival_s)

    def select(self, backlog: Sequence[Session], slots: int, pressure: Pressure,
               ctx: PolicyContext) -> list[Session]:
        """Up to `slots` sessions of `backlog` (arrival order) to admit now, in admission order."""
        self._count_arrivals(backlog)
        if slots <= 0 or not backlog:
            return []
        cfg, kv = self.config, ctx.kv
        cost = {s.session_id: kv.blocks_for(s.first_prompt_tokens) for s in backlog}
        budget = pressure.budget_blocks
        low_pressure = (not pressure.cpu_overloaded and not pressure.kv_overloaded
                        and pressure.cpu_healthy and pressure.kv_usage <= cfg.kv_low)
        if low_pressure and len(backlog) <= slots and sum(cost.values()) <= budget:
            self.mode, candidates = "fcfs", list(backlog)
        elif pressure.cpu_overloaded:
            self.mode = "largest-first"
            candidates = sorted(backlog, key=lambda s: (-s.first_prompt_tokens, s.first_arrival_s))
        else:
            self.mode = "smallest-first"
            candidates = sorted(backlog, key=lambda s: (s.first_prompt_tokens, s.first_arrival_s))
        short_waited = next((ctx.now - s.first_arrival_s for s in backlog if not self.is_long(s)), 0.0)
        long_room = 0
        if not pressure.kv_overloaded and short_waited < self.long_wait_threshold_s():
            long_room = max(0, cfg.max_long_inflight - self.long_in_flight(ctx))
        chosen: list[Session] = []
        for s in candidates:
            if len(chosen) >= slots:
                break
            long = self.is_long(s)
            if (long and long_room <= 0) or cost[s.session_id] > budget:
                continue
            chosen.append(s)
            budget -= cost[s.session_id]
            if long:
                long_room -= 1
        if not chosen and ctx.admitted_active == 0:
            chosen = [candidates[0]]
        for s in chosen:
            if self.is_long(s):
                self.long_sessions.add(s.session_id)
        return chosen


class AimdAdmission(Admission):
    """MARS session admission: AIMD window with CPU/KV hysteresis + `LoadBalancer` ordering."""

    def __init__(self, config: AimdConfig, balancer: LoadBalancer | None = None) -> None:
        if config.w_max is None or config.w_init is None:
            raise ValueError("AimdAdmission: size the window first (AimdConfig.sized(tool_workers))")
        self.config = config
        self.interval_s = config.interval_s
        self.balancer = balancer or LoadBalancer(config)
        self.window = config.w_init
        self.cpu_cap = config.w_max
        self.kv_cap = config.w_max
        self.pressure = Pressure()
        self._pending_blocks = 0     # blocks of sessions admitted since the last tick

    @property
    def limit(self) -> int:
        return min(self.window, self.cpu_cap, self.kv_cap)

    def budget_blocks(self, ctx: PolicyContext) -> int:
        """Free blocks above the (1 - kv_high) reserve, minus the demand already queued."""
        kv = ctx.kv
        reserve = math.ceil(kv.total_blocks * (1.0 - self.config.kv_high))
        return kv.free_blocks - reserve - kv.waiting_demand_blocks

    def tick(self, ctx: PolicyContext) -> None:
        cfg, p = self.config, self.pressure
        backlog, wait = ctx.cpu.backlog, ctx.cpu.ema_queue_wait_s
        usage = ctx.kv.usage
        p.cpu_healthy = backlog <= cfg.cpu_backlog_low and wait <= cfg.cpu_wait_low_s
        if p.cpu_overloaded:
            p.cpu_overloaded = not p.cpu_healthy
        else:
            p.cpu_overloaded = backlog >= cfg.cpu_backlog_high or wait >= cfg.cpu_wait_high_s
        if p.kv_overloaded:
            p.kv_overloaded = usage > cfg.kv_low
        else:
            p.kv_overloaded = usage >= cfg.kv_high
        p.kv_usage = usage
        p.budget_blocks = self.budget_blocks(ctx)
        self._pending_blocks = 0
        if p.cpu_overloaded or p.kv_overloaded:
            self.window = max(cfg.w_min, math.floor(cfg.decrease * self.window))
        elif p.cpu_healthy and usage <= cfg.kv_low and p.budget_blocks > 0:
            self.window = min(cfg.w_max, self.window + cfg.increase)
        workers = max(1, ctx.cpu.tool_workers)
        cpu_cap = math.ceil(workers * (cfg.cpu_backlog_low + cfg.cpu_backlog_high) / 2.0)
        self.cpu_cap = max(cfg.w_min, min(cfg.w_max, cpu_cap))
        if usage <= cfg.kv_low:
            self.kv_cap = cfg.w_max
        elif usage >= cfg.kv_high:
            self.kv_cap = cfg.w_min
        else:
            frac = (usage - cfg.kv_low) / (cfg.kv_high - cfg.kv_low)
            self.kv_cap = max(cfg.w_min, min(cfg.w_max, round(cfg.w_max - frac * (cfg.w_max - cfg.w_min))))

    def select(self, backlog: Sequence[Session], ctx: PolicyContext) -> list[Session]:
        slots = self.limit - ctx.admitted_active
        if slots <= 0:
            return []
        p = self.pressure
        budget = p.budget_blocks - self._pending_blocks
        view = Pressure(p.cpu_overloaded, p.kv_overloaded, p.cpu_healthy, p.kv_usage, budget)
        chosen = self.balancer.select(backlog, slots, view, ctx)
        self._pending_blocks += sum(ctx.kv.blocks_for(s.first_prompt_tokens) for s in chosen)
        return chosen

    def stats(self) -> dict:
        p = self.pressure
        return {"window": self.window, "limit": self.limit, "cpu_cap": self.cpu_cap,
                "kv_cap": self.kv_cap, "cpu_overloaded": p.cpu_overloaded,
                "kv_overloaded": p.kv_overloaded, "kv_usage": p.kv_usage,
                "budget_blocks": p.budget_blocks, "mode": self.balancer.mode,
                "long_in_flight": len(self.balancer.long_sessions),
                "arrival_rate": self.balancer.arrival_rate()}
