"""MARS' global load balancer: the order in which parked sessions are admitted, within the limits
the control loop (`admission.py`) sets, and the pressure it read at its last tick."""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter

from mars_openhands.core.aimd_config import AimdConfig
from mars_openhands.core.context import PolicyContext
from mars_openhands.core.model import Session
from mars_openhands.core.ordering import LEVEL_BOUNDS, size_level

#: Backlog sort keys (C getters: the balancer sorts the whole backlog).
_BY_ARRIVAL = attrgetter("first_arrival_s")
_FINISHED = attrgetter("turns_finished")
_CONTEXT, _PROMPT = attrgetter("context_tokens"), attrgetter("prompt_tokens")
#: New sessions whose admission waits set the overdue bar: the fewest whose longest wait is their
#: 95th percentile (the p95 latency's tail).
TAIL_SAMPLE = 20


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


class LoadBalancer:
    """Order of admission from the backlog (paper, "global load balancer").

    - paused sessions (admitted before, paused at a turn boundary) first, oldest first: they hold
      progress, and resuming them is what the limits are waiting for;
    - then FCFS when pressure is low (no overload, CPU healthy, usage <= 0.85) and the whole
      backlog fits the free slots and the KV budget;
    - CPU overloaded: largest estimated first prefill first (GPU-heavy sessions add no tool load);
    - otherwise (normal or KV pressure): smallest first prefill first.
    Sizes are compared by class, the MLFQ level of the first prefill (`size_bounds`, the MLFQ's level
    bounds: by default <= 2k, 8k, 32k tokens, more), and a class goes in arrival order (ours):
    within a class a prefill's size says nothing of how long the session runs, and ordering by it
    only reorders the door, so the sessions in the middle of the range wait for both ends and make
    the p95 (point B: the 22-turn session's 1,448-token prompt waited 10 s while 1,211-1,352-token
    ones went first).
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

    def __init__(self, config: AimdConfig | None = None, *, pressure_aware: bool = True,
                 size_bounds: Sequence[int] = LEVEL_BOUNDS) -> None:
        config = self.config = config if config is not None else AimdConfig()
        #: The size classes' upper bounds in tokens: the MLFQ's level bounds (`MlfqConfig`).
        self._size_bounds = tuple(size_bounds)
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
        sign, bounds = (-1 if self.mode == "largest-first" else 1), self._size_bounds
        new = sorted(new, key=lambda s: (sign * size_level(s.first_prompt_tokens, bounds), s.first_arrival_s))
        long = [s for s in new if s.first_prompt_tokens > self._long_tokens]
        self._size_order = (key, new, long)
        return new, long

    def select(self, backlog: Sequence[Session], slots: int, pressure: Pressure,
               ctx: PolicyContext, room_blocks: float = math.inf) -> list[Session]:
        """Up to `slots` sessions of `backlog` (arrival order) to admit now, in admission order;
        their predicted footprints together fit `room_blocks` (the KV window's room).

        In smallest-first order a new session that does not fit ends the pass: the new sessions
        behind it are of its size class, which goes in arrival order, or of a larger one (this
        keeps a pass over a backlog of hundreds short when the limits bind)."""
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
            cost, fp = s.prefill_blocks(bs), -(-((c if c > p else p) + growth) // bs)
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
