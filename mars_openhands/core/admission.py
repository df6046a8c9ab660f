"""MARS' external control plane: AIMD over the tool plane, a KV working-set window, and a
pressure-aware load balancer (docs/policies.md#admission-aimd-window).

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
  calls running while calls queue: a host full of 4-core builds runs a quarter as many calls as it
  has workers, and a cap in workers would let four times too many sessions queue for it.

  The paper's cpu_cap assumes every admitted session has a tool call in flight. We measure the
  share instead: an EMA of the admitted sessions with no call in the engine (in a tool, or
  between calls), so cpu_cap sessions still put (low + high) / 2 x workers tool calls in flight
  on average. Sessions whose tools take milliseconds then do not cap the engine at 1.5 sessions
  per tool worker; when tools queue, the share rises to 1 and cpu_cap is the paper's again.

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
not overloaded, the head of the backlog is admitted whatever the limits say, so the engine never
idles for more than one control period while work is parked. (With the tool plane overloaded,
the idle engine is the bottleneck working: more sessions would only queue for tools.)

Paper constants (MARS preview): the interval, W_min, 0.7 / +1, the watermarks, cpu_cap's, 50k
tokens / 2 long sessions. There is no W_max unless configured (the preview's 30; OpenHands runs
8): W grows only while it binds, cpu_cap bounds the tool plane and K the KV cache.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from mars_openhands.core.context import PolicyContext
from mars_openhands.core.model import Session
from mars_openhands.core.strategies import Admission, Stats

#: EMA weight of the engaged and tool shares per tick (0.2 s): a time constant of about 4 s,
#: several LLM turns, so one burst of tool completions does not swing the limits.
SHARE_EMA = 0.05
#: Backlog sort keys (C getters: the balancer sorts the whole backlog).
_BY_ARRIVAL = attrgetter("first_arrival_s")
_BY_SIZE = attrgetter("first_prompt_tokens", "first_arrival_s")
_FINISHED = attrgetter("turns_finished")
_CONTEXT, _PROMPT = attrgetter("context_tokens"), attrgetter("prompt_tokens")
#: New sessions whose admission waits set the overdue bar: the fewest whose longest wait is their
#: 95th percentile (the p95 latency's tail).
TAIL_SAMPLE = 20
#: Floor of both shares: K is at most 20 x what fits resident and cpu_cap 20 x the paper's
#: (sessions that spend 95 % of their time on one plane; below that the estimate rests on too
#: few sessions on the other).
MIN_SHARE = 0.05


@dataclass(frozen=True, slots=True)
class AimdConfig:
    interval_s: float = 0.2
    w_min: int = 4
    #: Initial session window (None: W_min). W_max None: no fixed cap (see the module docstring).
    w_init: int | None = None
    w_max: int | None = None
    increase: int = 1
    decrease: float = 0.7
    cpu_backlog_high: float = 2.0
    cpu_backlog_low: float = 1.0
    cpu_wait_high_s: float = 5.0
    cpu_wait_low_s: float = 2.0
    kv_high: float = 0.9            # also the KV target: the resident working set keeps 10 % free
    kv_low: float = 0.85
    long_prefill_tokens: int = 50_000
    max_long_inflight: int = 2
    #: Off: admit by the session window only (the paper's control plane, for ablation).
    kv_window: bool = True

    def __post_init__(self) -> None:
        w_init = self.w_init if self.w_init is not None else self.w_min
        checks = [
            ("w_min <= w_init <= w_max", 1 <= self.w_min <= w_init <= (self.w_max or w_init)),
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
    budget_blocks: int = 0        # free (or pinned) blocks above the 10 % reserve, minus queued demand

    def with_budget(self, budget_blocks: int) -> Pressure:
        """A copy with another budget (`dataclasses.replace`, without its cost on every step)."""
        return Pressure(self.cpu_overloaded, self.kv_overloaded, self.cpu_healthy, self.kv_usage, budget_blocks)


def footprints(ctx: PolicyContext) -> Callable[[Session], int]:
    """`footprint(s)`: the blocks `s` is predicted to need at its next turn, its context so far
    plus one turn's measured growth (built once per pass: it runs for every admitted session at
    every tick)."""
    growth, block_size = round(ctx.turn_growth_tokens), ctx.kv.block_size

    def footprint(s: Session) -> int:
        c, p = s.context_tokens, s.prompt_tokens     # (not max(): this is the hottest call)
        return -(-((c if c > p else p) + growth) // block_size)
    return footprint


@dataclass
class WorkingSet:
    """The admitted sessions and their predicted KV footprint (re-summed at each tick)."""

    sessions: dict[str, Session] = field(default_factory=dict)
    blocks: int = 0
    #: As of the last `refresh`: footprint and count of the sessions with a call in the engine.
    engaged_blocks: int = 0
    in_engine: int = 0
    #: `youngest_first`, kept until a session joins or leaves (ticks read it far more often)
    _youngest: list[Session] | None = field(default=None, repr=False)

    def add(self, s: Session, ctx: PolicyContext) -> None:
        self.sessions[s.session_id] = s
        self.blocks += footprints(ctx)(s)
        self._youngest = None

    def remove(self, s: Session, ctx: PolicyContext) -> None:
        """Take `s` out now (paused), its footprint with it."""
        if self.sessions.pop(s.session_id, None) is not None:
            self.blocks -= footprints(ctx)(s)
            self._youngest = None

    def refresh(self, ctx: PolicyContext) -> None:
        """Drop sessions that left the window (ended, idle-released, suspended); re-sum, also
        the part with a call in the engine (one pass: this runs at every tick)."""
        gone: list[str] = []
        growth, block_size, known = round(ctx.turn_growth_tokens), ctx.kv.block_size, ctx.sessions
        blocks = engaged_blocks = in_engine = 0
        for sid, s in self.sessions.items():
            if not (s.holds_slot and not s.ended and known.get(sid) is s):
                gone.append(sid)
                continue
            c, p = s.context_tokens, s.prompt_tokens     # (`footprints`, inlined: per tick)
            fp = -(-((c if c > p else p) + growth) // block_size)
            blocks += fp
            if s.turns > s.turns_finished:
                engaged_blocks += fp
                in_engine += 1
        if gone:
            for sid in gone:
                del self.sessions[sid]
            self._youngest = None
        self.blocks, self.engaged_blocks, self.in_engine = blocks, engaged_blocks, in_engine

    def youngest_first(self) -> list[Session]:
        """Every session but the oldest, youngest (latest admitted, then latest arrived) first,
        ties in the order they joined. Read-only: it is shared until the set changes."""
        if self._youngest is None:
            self._youngest = sorted(self.sessions.values(),
                                    key=lambda s: (-(s.admitted_s or 0.0), -s.first_arrival_s))[:-1]
        return self._youngest


class LoadBalancer:
    """Order of admission from the backlog (paper, "global load balancer").

    - paused sessions (admitted before, paused at a turn boundary) first, oldest first: they hold
      progress, and resuming them is what the limits are waiting for;
    - then FCFS when pressure is low (no overload, CPU healthy, usage <= 0.85) and the whole
      backlog fits the free slots and the KV budget;
    - CPU overloaded: largest estimated first prefill first (GPU-heavy sessions add no tool load);
    - otherwise (normal or KV pressure): smallest first prefill first.
    Every admission must fit the KV budget (blocks of its next prefill; blocks only pins hold
    count as free: pins are revocable). A "long" new session (first prefill > 50k tokens) is
    admitted only when no short session in the backlog has waited >= max(0.2, min(5, 1 / arrival
    rate)) s, KV is not overloaded and fewer than 2 long sessions are in flight.

    Anti-starvation (ours): that gate, with smallest-first order, keeps a long session out for as
    long as the backlog holds short ones, which under sustained load is the whole run (long-context
    / 8 workers / moderate: every long session waited 5,300-7,000 s, a short one 1,400 s on
    average). A long session that has waited at least the mean admission wait of the new sessions
    admitted so far is *overdue*: it goes first (arrival order, after paused sessions) and passes
    the short-wait gate; the KV checks and the 2-in-flight cap still apply. No constant: the bar is
    what a new session measurably waits here.

    `pressure_aware=False` (`mars-no-balancer`) keeps only the first rule: the rest of the backlog
    in arrival order, no session long.
    """

    def __init__(self, config: AimdConfig = AimdConfig(), *, pressure_aware: bool = True) -> None:
        self.config = config
        #: Off (an ablation): arrival order, paused sessions first, and no long-session gate.
        self.pressure_aware = pressure_aware
        self._long_tokens = config.long_prefill_tokens if pressure_aware else math.inf
        self.mode = "idle" if pressure_aware else "fcfs"
        self.long_sessions: set[str] = set()
        self._at_last: set[str] = set()     # sessions counted at the latest arrival time
        self._arrivals = 0
        self._first_arrival = math.inf
        self._last_arrival = -math.inf
        self._admitted_new = 0
        self._admitted_wait_s = 0.0
        self._waits: deque[float] = deque(maxlen=TAIL_SAMPLE)   # the latest new sessions' admission waits
        self._size_order: tuple[tuple[str, tuple[Session, ...]], list[Session], list[Session]] | None = None
        self._split: tuple[tuple[tuple[Session, ...], tuple[int, ...]], list[Session], list[Session], int] | None = None

    def is_long(self, s: Session) -> bool:
        return s.turns_finished == 0 and s.first_prompt_tokens > self._long_tokens

    def admitted(self, chosen: Sequence[Session], now: float) -> None:
        """Count the admission wait of the new sessions in `chosen` (the overdue bar)."""
        for s in chosen:
            if not s.turns_finished:
                self._admitted_new += 1
                self._admitted_wait_s += now - s.first_arrival_s
                self._waits.append(now - s.first_arrival_s)

    def overdue_bar_s(self) -> float:
        """Mean admission wait of the new sessions admitted so far (inf before the first)."""
        return self._admitted_wait_s / self._admitted_new if self._admitted_new else math.inf

    def tail_bar_s(self) -> float:
        """The longest admission wait of the latest 20 new sessions admitted (inf before 20): a
        session that waited longer is being passed over by every one of them (the tail the p95
        reads)."""
        return max(self._waits) if len(self._waits) == TAIL_SAMPLE else math.inf

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

    def order(self, backlog: Sequence[Session], slots: int, pressure: Pressure,
              blocks_for: Callable[[int], int], now: float) -> list[Session]:
        """The backlog in admission order (sets `mode`): paused, overdue long, then new sessions."""
        resumed, new = self._order(backlog, slots, pressure, blocks_for, now)
        return resumed + new

    def _order(self, backlog: Sequence[Session], slots: int, pressure: Pressure,
               blocks_for: Callable[[int], int], now: float) -> tuple[list[Session], list[Session]]:
        """`order`, as (paused sessions, the new ones after them)."""
        resumed, new = self._paused_and_new(backlog)
        if not self.pressure_aware:
            return resumed, new
        low_pressure = (not pressure.cpu_overloaded and not pressure.kv_overloaded
                        and pressure.cpu_healthy and pressure.kv_usage <= self.config.kv_low)
        if (low_pressure and len(backlog) <= slots
                and sum(blocks_for(s.prompt_tokens) for s in backlog) <= pressure.budget_blocks):
            self.mode = "fcfs"
            return resumed, new
        self.mode = "largest-first" if pressure.cpu_overloaded else "smallest-first"
        new, long = self._by_size(new)
        bar = self.overdue_bar_s()
        # overdue: long and waited past the bar; only the long ones can be (all here are new)
        overdue = [s for s in long if now - s.first_arrival_s >= bar] if bar < math.inf else None
        if overdue:
            late = set(map(id, overdue))
            new = sorted(overdue, key=_BY_ARRIVAL) + [s for s in new if id(s) not in late]
        return resumed, new

    def _paused_and_new(self, backlog: Sequence[Session]) -> tuple[list[Session], list[Session]]:
        """The paused sessions of `backlog` oldest first, and its new ones in backlog order; kept
        while the same sessions are parked with the same progress (as `_by_size`). Read-only."""
        key = (tuple(backlog), tuple(map(_FINISHED, backlog)))
        if self._split is None or self._split[0] != key:
            paused = sorted((s for s in backlog if s.turns_finished), key=_BY_ARRIVAL)
            # the lightest paused session's weight (`footprints`): a parked session's context and
            # prompt change only with its progress, which is part of the key
            lightest = min(map(max, map(_CONTEXT, paused), map(_PROMPT, paused)), default=0)
            self._split = (key, paused, [s for s in backlog if not s.turns_finished], lightest)
        return self._split[1], self._split[2]

    def _lightest_paused(self) -> int:
        """max(context, prompt) of the lightest paused session of the last `_paused_and_new`."""
        assert self._split is not None
        return self._split[3]

    def _by_size(self, new: list[Session]) -> tuple[list[Session], list[Session]]:
        """`new` in the mode's size order, and its long sessions in that order. A session's first
        prompt and arrival never change, so the same sessions in the same backlog order sort the
        same: the last sort is reused (the balancer runs whenever the limits move, mostly over an
        unchanged backlog)."""
        key = (self.mode, tuple(new))
        if self._size_order is not None and self._size_order[0] == key:
            return self._size_order[1], self._size_order[2]
        if self.mode == "largest-first":
            new = sorted(new, key=lambda s: (-s.first_prompt_tokens, s.first_arrival_s))
        else:
            new = sorted(new, key=_BY_SIZE)
        long = [s for s in new if s.first_prompt_tokens > self._long_tokens]
        self._size_order = (key, new, long)
        return new, long

    def select(self, backlog: Sequence[Session], slots: int, pressure: Pressure,
               ctx: PolicyContext, room_blocks: float = math.inf) -> list[Session]:
        """Up to `slots` sessions of `backlog` (arrival order) to admit now, in admission order;
        their predicted footprints together fit `room_blocks` (the KV window's room).

        In smallest-first order a new session that does not fit ends the pass: the new sessions
        behind it have larger first prompts, so larger costs and footprints (this keeps a pass
        over a backlog of hundreds short when the limits bind)."""
        self._count_arrivals(backlog)
        if slots <= 0 or not backlog or room_blocks < 0 or pressure.budget_blocks < 0:
            return []          # (costs and footprints are >= 0: nothing fits a negative room)
        cfg, blocks_for = self.config, ctx.kv.blocks_for
        budget = pressure.budget_blocks
        now = ctx.now
        resumed, new = self._order(backlog, slots, pressure, blocks_for, now)
        # (`footprints`, `blocks_for`, `is_long` and the overdue test inlined: the pass may run over
        # hundreds of parked sessions at every tick)
        growth, bs, long_tokens = round(ctx.turn_growth_tokens), ctx.kv.block_size, self._long_tokens
        bar = self.overdue_bar_s()
        # Paused sessions are tried one by one; while the KV window binds not even the smallest
        # fits, and the pass goes straight to the new ones (the backlog holds hundreds). A
        # footprint grows with max(context, prompt): the smallest is the lightest session's.
        candidates = new
        if resumed and -(-(self._lightest_paused() + growth) // bs) <= room_blocks:
            candidates = resumed + new
        sorted_by_size = self.mode == "smallest-first"
        short_waited = next((now - s.first_arrival_s for s in backlog
                             if not s.turns_finished and not self.is_long(s)), 0.0)
        long_room = 0 if pressure.kv_overloaded else max(0, cfg.max_long_inflight - self.long_in_flight(ctx))
        short_gate_open = short_waited < self.long_wait_threshold_s()
        chosen: list[Session] = []
        for s in candidates:
            if len(chosen) >= slots:
                break
            fresh = not s.turns_finished
            long = fresh and s.first_prompt_tokens > long_tokens
            overdue = long and now - s.first_arrival_s >= bar
            if long and (long_room <= 0 or not (short_gate_open or overdue)):
                continue
            c, p = s.context_tokens, s.prompt_tokens
            cost, fp = -(-p // bs), -(-((c if c > p else p) + growth) // bs)
            if cost > budget or fp > room_blocks:
                if sorted_by_size and fresh and not overdue:
                    break          # (overdue ones come first, out of size order)
                continue
            chosen.append(s)
            budget -= cost
            room_blocks -= fp
            if long:
                long_room -= 1
        for s in chosen:
            if self.is_long(s):
                self.long_sessions.add(s.session_id)
        return chosen


class AimdAdmission(Admission):
    """MARS session admission: AIMD session and KV windows + `LoadBalancer` ordering."""

    def __init__(self, config: AimdConfig, balancer: LoadBalancer | None = None) -> None:
        self.config = config
        self.interval_s = config.interval_s
        self.balancer = balancer or LoadBalancer(config)
        self.window: int = config.w_init if config.w_init is not None else config.w_min
        #: The tool plane's bound on the window; None (unbounded) before the first tick without W_max.
        self.cpu_cap: int | None = config.w_max
        self.kv_window: float = math.inf       # blocks; set from the cache at the first tick
        self.kv_admit_window: float = math.inf     # the same at the engaged share's recent peak
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
        self.engaged_share = 1.0
        self.engaged_peak = 1.0
        self.tool_share = 1.0
        #: EMA of the tool calls the host runs at once while calls queue for it (None until they do).
        self.host_runs: float | None = None

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
        ws.refresh(ctx)
        # Liveness: nothing admitted is in the engine. With the tool plane overloaded that is the
        # bottleneck working, not idleness: more sessions would only queue for tools.
        self._engine_idle = not p.cpu_overloaded and ws.in_engine == 0
        healthy = p.cpu_healthy and usage <= cfg.kv_low and not preempted
        if p.cpu_overloaded or p.kv_overloaded:
            self.window = max(cfg.w_min, math.floor(cfg.decrease * self.window))
        elif healthy and p.budget_blocks > 0 and len(ws.sessions) >= self.window:
            self.window += cfg.increase
            if cfg.w_max is not None:
                self.window = min(cfg.w_max, self.window)
        workers = max(1, ctx.cpu.tool_workers)
        sessions = len(ws.sessions)
        out_share = (sessions - ws.in_engine) / sessions if sessions else 1.0
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

    def _move_kv_window(self, ctx: PolicyContext) -> None:
        ws, resident = self.working_set, self.resident_blocks(ctx)
        share = ws.engaged_blocks / ws.blocks if ws.blocks else 1.0
        self.engaged_share += SHARE_EMA * (share - self.engaged_share)
        self.engaged_peak = max(share, self.engaged_peak + SHARE_EMA * (share - self.engaged_peak))
        self.kv_window = resident / max(self.engaged_share, MIN_SHARE)
        self.kv_admit_window = resident / max(self.engaged_peak, MIN_SHARE)
        excess = ws.blocks - self.kv_window
        extra = len(ws.sessions) - self.cpu_cap if self.pressure.cpu_overloaded and self.cpu_cap else 0
        self._to_suspend = set()
        if excess > 0 or extra > 0:
            footprint = footprints(ctx)
            for s in ws.youngest_first():          # never the oldest: one session always runs
                if excess <= 0 and extra <= 0:
                    break
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
                self._fruitless = None if chosen else state
        if not chosen:
            if self._engine_idle:
                # Nothing admitted was in the engine at the last tick: admitting cannot crowd anyone
                # out, idling can (checked once a tick: the engine idles at most one control period).
                chosen = self.balancer.order(backlog, 1, p, ctx.kv.blocks_for, ctx.now)[:1]
                self.idle_admits += 1
            elif self._tail_pass and slots <= 0 and self.cpu_cap is not None and self.cpu_cap < self.window:
                # The tool plane's cap, not the window, holds the backlog: once a tick, a session
                # every later one has passed goes in (`_overdue_head`).
                chosen = self._overdue_head(backlog, ctx)
        self._engine_idle = self._tail_pass = False
        if chosen:
            self._admitted(chosen, ctx)
        return chosen

    def _kv_room(self) -> float:
        """Blocks of footprint the KV window admits on top of the working set (inf when off)."""
        return self.kv_admit_window - self.working_set.blocks if self.config.kv_window else math.inf

    def _overdue_head(self, backlog: Sequence[Session], ctx: PolicyContext) -> list[Session]:
        """The oldest new session past the balancer's tail bar, if its first prefill fits the KV
        budget and its footprint the KV window: the tool plane's cap must not keep one session out
        while every later one goes by (the p95 reads it)."""
        bar, now = self.balancer.tail_bar_s(), ctx.now
        s = next((s for s in backlog if not s.turns_finished and now - s.first_arrival_s >= bar), None)
        if s is None:
            return []
        if (ctx.kv.blocks_for(s.prompt_tokens) > self.pressure.budget_blocks - self._pending_blocks
                or footprints(ctx)(s) > self._kv_room()):
            return []
        self.overdue_admits += 1
        return [s]

    def _admitted(self, chosen: Sequence[Session], ctx: PolicyContext) -> None:
        self.balancer.admitted(chosen, ctx.now)
        for s in chosen:
            self._pending_blocks += ctx.kv.blocks_for(s.prompt_tokens)
            self.working_set.add(s, ctx)

    def rejoin(self, s: Session, ctx: PolicyContext) -> None:
        if s.session_id not in self.working_set.sessions:
            self.working_set.add(s, ctx)

    def liveness_bound_s(self, ctx: PolicyContext) -> float | None:
        """One control period, unless the tool plane is overloaded (see the module docstring)."""
        return None if self.pressure.cpu_overloaded else self.interval_s

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
                "kv_window_blocks": None if self.kv_window == math.inf else self.kv_window,
                "kv_admit_window_blocks": None if self.kv_admit_window == math.inf else self.kv_admit_window,
                "working_set_blocks": self.working_set.blocks,
                "cpu_overloaded": p.cpu_overloaded, "kv_overloaded": p.kv_overloaded,
                "kv_usage": p.kv_usage, "budget_blocks": p.budget_blocks,
                "mode": self.balancer.mode, "long_in_flight": len(self.balancer.long_sessions),
                "suspended": self.suspended, "idle_admits": self.idle_admits,
                "overdue_admits": self.overdue_admits,
                "arrival_rate": self.balancer.arrival_rate()}
