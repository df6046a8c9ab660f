"""MARS' external control plane: AIMD over the tool plane, a KV working-set window, and a
pressure-aware load balancer (docs/policies.md#admission-aimd-window). This module is the control
loop (`AimdAdmission`); the working set and KV window are in `working_set.py`, the balancer's order
in `balancer.py`, the constants in `aimd_config.py`.

Every `interval_s` (0.2 s) `tick()` reads both planes and moves two limits:

- the session window W (paper, CPU plane), with hysteresis flags:

      CPU overloaded: enter backlog >= 2.0 or EMA wait >= 5 s; leave backlog <= 1.0 and wait <= 2 s
                      (the wait EMA moves only when a tool call starts, so with no call queued
                      it is stale: nobody waits then, and the wait counts as 0)
      KV overloaded:  enter usage >= 0.9; leave usage <= 0.85 (blocks only pins hold count as free)
      any overload                                                 -> W = max(W_min, floor(0.7 W))
      CPU healthy, usage <= 0.85, no preemption, spare blocks, W binds -> W = W + 1
      limit = min(W, cpu_cap = ceil(calls x (1.0 + 2.0) / 2 / tool share))

  Backlog is tool calls in flight per call the host can run: per worker while nothing queues,
  else per call running now. `calls` is the workers until calls first queue, then an EMA of the
  calls running while calls queue: what a full host measurably runs, which is not its workers where
  calls hold fractions of one (five file views share a worker) or where a real host runs fewer
  heavy builds at once than it has workers.

  The paper's cpu_cap assumes every admitted session has a tool call in flight. We measure the
  share instead: an EMA of the admitted sessions in a tool among those in a tool or with a call
  in the engine, so cpu_cap sessions still put (low + high) / 2 x workers tool calls in flight
  on average. Sessions whose tools take milliseconds then do not cap the engine at 1.5 sessions
  per tool worker; when tools queue, the share rises to 1 and cpu_cap is the paper's again. A
  session that reports its tools and has none open is on neither plane (its reply on the way to
  the agent, its next call on the way back: counted as tool time, these hops put the share at
  0.68-0.88 on a real engine against 0.31-0.60 in `--engine vllm` on the same trace); one that
  sends no tool events counts in a tool whenever it is out of the engine.

- the KV window K (ours, GPU plane, in blocks): the admitted sessions' predicted footprints
  (`footprints`: context so far plus the measured growth of one turn) must sum to at most
  K = resident / share, where resident = 0.9 x the cache (the paper's KV target) and share is an
  EMA of the fraction of that footprint engaged in the engine (a call queued or running).
  Sessions share the cache in time: one in a tool needs no KV (a pin is revocable, so it is
  priced, not reserved), so with share 1/3 three times the cache can be admitted; when calls
  queue in the engine, share rises and K falls back towards what fits resident at once.
  New sessions are admitted against the share's recent peak instead (it follows a rise at once
  and falls back at the EMA's rate): returns from tools come in waves (a burst of sessions runs
  its tools together), and a session admitted into the trough of a wave is what the cache must
  evict at its crest, so the others return to a recomputed prefix. The mean still decides when
  admitted sessions are paused: pausing costs a session its turn, holding one back costs nothing
  yet.

When the working set outgrows K, or the tool plane is overloaded with more sessions admitted
than cpu_cap, the youngest admitted sessions are paused at their next turn boundary (`suspend`;
their next call is parked and resumed before any new session), so a cache that the admitted
contexts outgrew, or a tool plane the admitted sessions flood, sheds sessions instead of
thrashing or queueing everyone behind everyone.

`select()` admits backlog sessions while both limits allow, in the `LoadBalancer`'s order.
Tail: when the tool plane's cap (not W) binds, once a tick the oldest new session that waited
longer than each of the latest 20 new sessions admitted goes in past it, within the KV limits.

Liveness: when, at a tick, no admitted session has a call in the engine and the tool plane is
not the bottleneck, the head of the backlog is admitted whatever the limits say, so the engine
never idles for more than one control period while work is parked. The tool plane is the
bottleneck when it is overloaded and was full (a call queued or every worker busy) in more than
half the ticks of the last ~4 s: then the idle engine is the bottleneck working, and more
sessions would only queue for tools. An overload that comes in bursts, with workers idle between
the waves, is not: holding calls there left the engine idle 62 % of a run on 2 tool workers.

The recompute budget decides how the cache is shared. Every tick an EMA over ~30 s measures the
share of wall time the engine spent computing tokens again (preempted calls, evicted prefixes: the
tokens finished calls were served beyond their new ones, at the measured prefill rate). Below
`recompute_budget` (0.15), or where W_min or more mean footprints fit resident (sessions share
such a cache steadily whatever they recompute), sessions share the cache in time, and W_min of
them are admitted whatever their footprints (a small cache shared by preemption beats sessions
waiting at the door). Past it the cache is the bottleneck (`kv_bound`, left only once twice W_min
footprints fit, each session counted at least at the mean footprint that ended sessions reached,
or the budget holds again): K is what fits resident at once, sessions are paused
only once their footprints pass the cache (`pause_over_cache`), the smallest first (each pause
costs a re-prefill), and the liveness admission is priced: the head goes to an idle engine only
if it fits beside the working set or re-prefilling what it evicts takes less than the expected
wait for an admitted session to come back (`_idle_admit_pays`).

Paper constants (MARS preview): the interval, W_min, 0.7 / +1, the watermarks, cpu_cap's, 50k
tokens / 2 long sessions. There is no W_max unless configured (the preview's 30; OpenHands runs
8): W grows only while it binds, cpu_cap bounds the tool plane and K the KV cache.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from mars_openhands.core.aimd_config import AimdConfig
from mars_openhands.core.balancer import LoadBalancer, Pressure
from mars_openhands.core.context import PolicyContext
from mars_openhands.core.model import Session
from mars_openhands.core.strategies import Admission, Stats
from mars_openhands.core.working_set import MIN_SHARE, SHARE_EMA, KvWindow, WorkingSet, footprints


class AimdAdmission(Admission):
    """MARS session admission: AIMD session and KV windows + `LoadBalancer` ordering."""

    def __init__(self, config: AimdConfig, balancer: LoadBalancer | None = None) -> None:
        self.config = config
        self.interval_s = config.interval_s
        self.balancer = balancer or LoadBalancer(config)
        self.window: int = config.w_init if config.w_init is not None else config.w_min
        #: The tool plane's bound on the window; None (unbounded) before the first tick without W_max.
        self.cpu_cap: int | None = config.w_max
        self.kv = KvWindow()
        self.working_set = WorkingSet()
        self.pressure = Pressure()
        self.suspended = 0
        self.idle_admits = 0
        self.overdue_admits = 0
        self._tail_pass = False
        self._pending_blocks = 0     # first-prefill blocks of sessions admitted since the last tick
        self._preemptions_seen = 0
        self._to_suspend: set[str] = set()
        self._engine_idle = False
        self._ticks = 0
        self._fruitless: tuple[int, int, int, int, int, float, int] | None = None   # see `select`
        self.tool_share = 1.0
        #: EMA over the ticks of the tool plane being full (a call queued, or every worker busy).
        self.tool_full = 1.0
        #: EMA of the tool calls the host runs at once while calls queue for it (None until they do).
        self.host_runs: float | None = None
        #: EMA of the share of wall time the engine spent computing tokens again (`kv_bound`).
        self.recompute_share = 0.0
        #: The working set's mean footprints that fit resident, as of the last tick (`kv_bound`).
        self.sessions_fit = math.inf
        self._recomputed_seen = 0
        self._kv_bound = False
        self.idle_holds = 0
        self._priced_hold = False     # the last idle engine was held at a price (`_idle_admit_pays`)

    @property
    def limit(self) -> int:
        return self.window if self.cpu_cap is None else min(self.window, self.cpu_cap)

    def resident_blocks(self, ctx: PolicyContext) -> int:
        """Blocks the admitted working set may hold resident at once (the KV target)."""
        return math.floor(ctx.kv.total_blocks * self.config.kv_high)

    def budget_blocks(self, ctx: PolicyContext) -> int:
        """Free and revocable blocks above the (1 - kv_high) reserve, minus the demand already
        queued. Revocable: only pins hold them (pins sharing a prefix hold it once, and a prefix
        a running call holds too is not freed by a revocation)."""
        kv = ctx.kv
        reserve = math.ceil(kv.total_blocks * (1.0 - self.config.kv_high))
        return kv.free_blocks + kv.revocable_blocks - reserve - kv.waiting_demand_blocks

    def tick(self, ctx: PolicyContext) -> None:
        self._ticks += 1
        cfg, p, ws = self.config, self.pressure, self.working_set
        backlog, wait = ctx.cpu.backlog, ctx.cpu.ema_queue_wait_s
        if ctx.cpu.nobody_waits:
            wait = 0.0     # nobody waits now, whatever the last starts measured
        kv = ctx.kv
        usage = 1.0 - (kv.free_blocks + kv.revocable_blocks) / kv.total_blocks if kv.total_blocks else 0.0
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
        self._tail_pass = True
        preempted = ctx.preemptions > self._preemptions_seen
        self._preemptions_seen = ctx.preemptions
        recomputed = ctx.recomputed_tokens - self._recomputed_seen
        self._recomputed_seen = ctx.recomputed_tokens
        busy = recomputed / max(ctx.prefill_tps, 1.0) / cfg.interval_s
        self.recompute_share += cfg.interval_s / cfg.recompute_window_s * (busy - self.recompute_share)
        ws.refresh(ctx)
        n, blocks, grown = len(ws.sessions), ws.blocks, ws.grown_blocks()
        if self._kv_bound and grown is not None:
            # Leaving counts each session at least at what ended sessions grew to: contexts grow
            # turn by turn, and a working set of sessions admitted a few turns ago fits the cache
            # only until they grow (it lifted the bound and re-thrashed the cache each time a large
            # session ended: SWE-agent on the H100).
            blocks = max(blocks, round(n * grown))
        self.sessions_fit = self.resident_blocks(ctx) * n / blocks if blocks else math.inf
        # (entered below W_min footprints, left only past `leave_bound_fit` x W_min: each pause and
        # return moves the fit across W_min, and flipping the rule with it thrashes the cache)
        fit_bar = cfg.w_min * (cfg.leave_bound_fit if self._kv_bound else 1.0)
        self._kv_bound = self.recompute_share > cfg.recompute_budget and self.sessions_fit < fit_bar
        self.tool_full += cfg.interval_s / cfg.tool_full_window_s * (float(ctx.cpu.full) - self.tool_full)
        # Liveness: nothing admitted is in the engine. With the tool plane overloaded and full most
        # of the last seconds, that is the bottleneck working, not idleness: more sessions would
        # only queue for tools. A burst that overloads a plane idle between waves is not.
        self._engine_idle = not self.tools_bottleneck and ws.in_engine == 0
        if ws.in_engine:
            self._priced_hold = False
        healthy = p.cpu_healthy and usage <= cfg.kv_low and not preempted
        if p.cpu_overloaded or p.kv_overloaded:
            self.window = max(cfg.w_min, math.floor(cfg.decrease * self.window))
        elif healthy and p.budget_blocks > 0 and len(ws.sessions) >= self.window:
            self.window += cfg.increase
            if cfg.w_max is not None:
                self.window = min(cfg.w_max, self.window)
        workers = max(1, ctx.cpu.tool_workers)
        sessions = len(ws.sessions)
        # (a session between a call and its tool, or a tool and its next call, is on neither plane)
        placed = ws.in_tools + ws.in_engine
        if placed or not sessions:
            out_share = ws.in_tools / placed if placed else 1.0
            self.tool_share += SHARE_EMA * (out_share - self.tool_share)
        runs = ctx.cpu.full_runs
        if runs is not None:
            # The host is full: the calls it runs now are what it can run (a build on 4 cores
            # takes 4 workers), so the cap counts calls, not workers (docs/policies.md).
            self.host_runs = runs if self.host_runs is None else self.host_runs + SHARE_EMA * (runs - self.host_runs)
        tools = (self.host_runs or workers) * (cfg.cpu_backlog_low + cfg.cpu_backlog_high) / 2.0
        # (rounded first: an EMA that converged to 1 must not ceil 12.0000001 to 13)
        cpu_cap = max(cfg.w_min, math.ceil(round(tools / max(self.tool_share, MIN_SHARE), 6)))
        self.cpu_cap = cpu_cap if cfg.w_max is None else min(cpu_cap, cfg.w_max)
        if cfg.kv_window:
            self._move_kv_window(ctx)

    @property
    def kv_bound(self) -> bool:
        """The cache is the bottleneck: the engine spent more than `recompute_budget` of the last
        `recompute_window_s` recomputing (preempted calls, evicted prefixes), and fewer than
        W_min of the working set's mean footprints fit resident: with more, the engaged share is
        steady and sharing the cache in time pays whatever it recomputes (the H200 heavy point
        recomputes for 0.9 of its time); with fewer, each return from a tool swings the engaged
        footprint past the cache and finds its context evicted. Once bound, the cache stays so
        until `leave_bound_fit` x W_min footprints fit: pausing makes the recompute share fall
        and the fit move across W_min within seconds, and sharing again thrashes the cache again
        (SWE-agent on the H100 flipped every 10-30 s)."""
        return self._kv_bound

    @property
    def tools_bottleneck(self) -> bool:
        """The tool plane is overloaded and was full for most of the last `tool_full_window_s`."""
        return self.pressure.cpu_overloaded and self.tool_full > self.config.tool_full_share

    def _move_kv_window(self, ctx: PolicyContext) -> None:
        ws, cfg, kv_bound = self.working_set, self.config, self.kv_bound
        self.kv.move(ws, self.resident_blocks(ctx), shared=not kv_bound)
        window = max(self.kv.blocks, cfg.pause_over_cache * ctx.kv.total_blocks) if kv_bound else self.kv.blocks
        excess = ws.blocks - window
        extra = len(ws.sessions) - self.cpu_cap if self.pressure.cpu_overloaded and self.cpu_cap else 0
        self._to_suspend = set()
        if excess > 0 or extra > 0:
            footprint = footprints(ctx)
            # Never the oldest: one session always runs. Below the recompute budget the youngest
            # go first and W_min stay; past it the smallest, the cheapest to prefill again.
            order = sorted(ws.youngest_first(), key=footprint) if kv_bound else ws.youngest_first()
            keep, left = (1 if kv_bound else cfg.w_min), len(ws.sessions)
            for s in order:
                if (excess <= 0 or left <= keep) and extra <= 0:
                    break
                left -= 1
                self._to_suspend.add(s.session_id)
                excess -= footprint(s)
                extra -= 1

    def select(self, backlog: Sequence[Session], ctx: PolicyContext) -> list[Session]:
        if not backlog:
            return []
        ws, p = self.working_set, self.pressure
        chosen: list[Session] = []
        slots = self.limit - len(ws.sessions)
        # Engines ask every step. Between ticks the limits only tighten as time passes (the long-
        # session gate), so a pass that admitted nobody admits nobody again until the backlog, the
        # working set, the measured turn growth (footprints), the known sessions (long ones in
        # flight) or the tick changes: skip it (the balancer is O(backlog log backlog)).
        if slots > 0:
            state = (self._ticks, len(backlog), len(ws.sessions), ws.blocks, self._pending_blocks,
                     ctx.turn_growth_tokens, len(ctx.sessions))
            if state != self._fruitless:
                view = p.with_budget(p.budget_blocks - self._pending_blocks)
                chosen = self.balancer.select(backlog, slots, view, ctx, self._kv_room())
                floor = min(slots, self.config.w_min - len(ws.sessions)) - len(chosen)
                if floor > 0 and not self.kv_bound:
                    # Recomputing is cheap here: W_min sessions share the cache by preemption
                    # whatever their footprints (the KV budget still binds their first prefill,
                    # beyond its prefix-cache hit).
                    taken = {s.session_id for s in chosen}
                    budget = view.budget_blocks - sum(s.prefill_blocks(ctx.kv.block_size) for s in chosen)
                    chosen += self.balancer.select([s for s in backlog if s.session_id not in taken], floor,
                                                   p.with_budget(budget), ctx)
                self._fruitless = None if chosen else state
        if not chosen:
            if self._engine_idle:
                # Nothing admitted was in the engine at the last tick: admitting cannot crowd anyone
                # out, idling can (checked once a tick: the engine idles at most one control period).
                head = self.balancer.order(backlog, 1, p, ctx.kv.blocks_for, ctx.now)[:1]
                if head and self.kv_bound and not self._idle_admit_pays(head[0], ctx):
                    self.idle_holds += 1
                    self._priced_hold = True
                else:
                    chosen = head
                    self.idle_admits += 1
                    self._priced_hold = False
            elif self._tail_pass and slots <= 0 and self.cpu_cap is not None and self.cpu_cap < self.window:
                # The tool plane's cap, not the window, holds the backlog: once a tick, a session
                # every later one has passed goes in (`_overdue_head`).
                chosen = self._overdue_head(backlog, ctx)
        self._engine_idle = self._tail_pass = False
        if chosen:
            self._admitted(chosen, ctx)
        return chosen

    def _idle_admit_pays(self, s: Session, ctx: PolicyContext) -> bool:
        """Admitting `s` to an idle engine costs less engine time than waiting for an admitted
        session to come back: its first prefill fits beside the working set, or the blocks it
        evicts take less to prefill again (at the measured rate) than the expected wait. A
        session away for less than the mean gap (`ctx.return_gap_s`) is expected back after the
        rest of it; one away longer, after as long again (the gaps are heavy-tailed: human
        pauses, long builds)."""
        ws, gap = self.working_set, ctx.return_gap_s
        if not ws.sessions or gap is None:
            return True
        room = max(0, self.resident_blocks(ctx) - ws.blocks)
        evict = ctx.kv.blocks_for(max(s.prompt_tokens, s.context_tokens)) - room
        if evict <= 0:
            return True
        wait = math.inf
        for o in ws.sessions.values():
            if o.turns == o.turns_finished and o.last_turn_finished_s is not None:
                away = ctx.now - o.last_turn_finished_s
                wait = min(wait, gap - away if away < gap else away)
        return evict * ctx.kv.block_size / max(ctx.prefill_tps, 1.0) <= wait

    def _kv_room(self) -> float:
        """Blocks of footprint the KV window admits on top of the working set (inf when off)."""
        return self.kv.admit_blocks - self.working_set.blocks if self.config.kv_window else math.inf

    def _overdue_head(self, backlog: Sequence[Session], ctx: PolicyContext) -> list[Session]:
        """The oldest new session past the balancer's tail bar, if its first prefill fits the KV
        budget and its footprint the KV window: the tool plane's cap must not keep one session out
        while every later one goes by (the p95 reads it)."""
        bar, now = self.balancer.tail_bar_s(), ctx.now
        s = next((s for s in backlog if not s.turns_finished and now - s.first_arrival_s >= bar), None)
        if s is None:
            return []
        if (s.prefill_blocks(ctx.kv.block_size) > self.pressure.budget_blocks - self._pending_blocks
                or footprints(ctx)(s) > self._kv_room()):
            return []
        self.overdue_admits += 1
        return [s]

    def _admitted(self, chosen: Sequence[Session], ctx: PolicyContext) -> None:
        self.balancer.admitted(chosen, ctx.now)
        for s in chosen:
            self._pending_blocks += s.prefill_blocks(ctx.kv.block_size)
            self.working_set.add(s, ctx)

    def rejoin(self, s: Session, ctx: PolicyContext) -> None:
        if s.session_id not in self.working_set.sessions:
            self.working_set.add(s, ctx)

    def liveness_bound_s(self, ctx: PolicyContext) -> float | None:
        """One control period, unless the tool plane is the bottleneck or an idle engine is held at
        a price (see the module docstring)."""
        return None if self.tools_bottleneck or self._priced_hold else self.interval_s

    def suspend(self, s: Session, ctx: PolicyContext) -> bool:
        """True if `s`, at a turn boundary now, must give its place back (see the module docstring)."""
        if s.session_id not in self._to_suspend:
            return False
        self._to_suspend.discard(s.session_id)
        self.working_set.remove(s, ctx)
        self.suspended += 1
        return True

    def stats(self) -> Stats:
        p = self.pressure
        return {"window": self.window, "limit": self.limit, "cpu_cap": self.cpu_cap, "host_runs": self.host_runs,
                "tool_share": self.tool_share, "ticks": self._ticks,
                "kv_window_blocks": None if self.kv.blocks == math.inf else self.kv.blocks,
                "kv_admit_window_blocks": None if self.kv.admit_blocks == math.inf else self.kv.admit_blocks,
                "working_set_blocks": self.working_set.blocks,
                "cpu_overloaded": p.cpu_overloaded, "tool_full": self.tool_full,
                "tools_bottleneck": self.tools_bottleneck, "kv_overloaded": p.kv_overloaded,
                "kv_usage": p.kv_usage, "budget_blocks": p.budget_blocks,
                "mode": self.balancer.mode, "long_in_flight": len(self.balancer.long_sessions),
                "suspended": self.suspended, "idle_admits": self.idle_admits,
                "overdue_admits": self.overdue_admits, "idle_holds": self.idle_holds,
                "recompute_share": self.recompute_share, "kv_bound": self.kv_bound,
                "sessions_fit": None if self.sessions_fit == math.inf else self.sessions_fit,
                "arrival_rate": self.balancer.arrival_rate()}
