"""A policy = one strategy per role + the shared context; the one object engines talk to.

Both engines (the simulator and the vLLM scheduler adapter) drive a `Policy` with the same calls,
in the same order, and never reach into its strategies or context, so a rule is implemented once:

  arrival   `on_request_arrival(req, now)` -> True if the call must be parked until admission;
            `resume_pin(session_id)` -> a pin to release once the call's prefix lookup is done.
  control   `admit(backlog, now)` -> the parked sessions to admit now (in order); it re-evaluates
            the control plane every `admission_interval_s` (next at `next_tick_s`).
  window    `max_active`: most calls the engine keeps active (running + waiting); the rest wait
            in an FCFS overflow queue (`core.window.ActiveWindow`). MARS uses its admission
            `w_max` when one is configured; None = unbounded (the default: admission bounds it).
  step      `observe_kv(...)`; `expired_pins(now)`; `order(requests, now)` or, for an engine that
            keeps a queue sorted, `sort_key(now)` (`stock_order`: the engine's own FCFS queues
            may stay as they are); `chunk_tokens(req, budget, remaining)`;
            on an allocation failure: `shrink(tokens)`, then `revocation_order()` pins, then
            `choose_victim(candidates)` + `on_preempted(victim, now)` (vLLM's priority policy:
            `order` and `choose_victim` with `by_priority`); a call's first prefill
            chunk: `observe_prefill_start(wait_s)`; finally `on_step(scheduled, waiting, now)`
            and `observe_prefill(tokens, seconds)`.
  finish    `on_request_finished(req, blocks, now)` -> pins to release + an offer to pin the
            call's blocks; the engine pins them and calls `record_pin(...)`.
  events    `on_event(event)` -> pins to release now (tool cancelled, session ended). Tool events
            of a session not seen yet are held until its next call; a tool start named
            `core.boundaries.INFERRED_TOOL` is inferred from a call that ended with tool calls and
            ends at the session's next call, for sessions that send no events of their own.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat

from mars_openhands.core.boundaries import BoundaryInference, HeldEvents, is_inferred
from mars_openhands.core.context import PolicyContext
from mars_openhands.core.idle import IdleRelease
from mars_openhands.core.measures import (
    PREFILL_RATE_EMA,
    PrefillStartLatency,
    observe_prefill_rate,
    observe_recompute,
    observe_return_gap,
    observe_turn_growth,
)
from mars_openhands.core.model import Pin, PinOffer, Request, Session
from mars_openhands.core.ordering import vllm_priority_key
from mars_openhands.core.strategies import (
    Admission,
    ChunkSizer,
    Ordering,
    Retention,
    SortKey,
    Stats,
    StatValue,
    VictimSelector,
)
from mars_openhands.core.tool_plane import ToolPlaneCount
from mars_openhands.core.victim import NewestVictim
from mars_openhands.events import (
    CpuTelemetry,
    EngineTelemetry,
    Event,
    SessionEnded,
    SessionEvent,
    ToolCancelled,
    ToolFinished,
    ToolStarted,
)


@dataclass(slots=True)
class FinishDecision:
    release: list[Pin] = field(default_factory=list)
    pin: PinOffer | None = None


@dataclass
class Policy:
    name: str
    ordering: Ordering
    chunking: ChunkSizer
    victim: VictimSelector
    retention: Retention
    admission: Admission | None      # None: every session is admitted on arrival
    ctx: PolicyContext
    #: Upper bound on pinned KV as a fraction of all blocks.
    max_pinned_fraction: float = 0.5
    #: Silent sessions give their window slot back, long-silent ones are forgotten (`core.idle`).
    idle: IdleRelease = field(default_factory=IdleRelease)
    #: Tool boundaries inferred for sessions that send no events, and tool events held for sessions
    #: not seen yet (replicas behind a router; `core.boundaries`).
    boundaries: BoundaryInference = field(default_factory=BoundaryInference)
    held: HeldEvents = field(default_factory=HeldEvents)
    #: Tools each session has counted on the tool plane (`core.tool_plane`).
    tools: ToolPlaneCount = field(default_factory=ToolPlaneCount, repr=False)
    _next_tick: float = field(default=-math.inf, repr=False)
    #: Published by `observe_kv` (`core.measures`).
    prefill_start: PrefillStartLatency = field(default_factory=PrefillStartLatency, repr=False)

    # ---- arrivals and admission --------------------------------------------------------------

    def on_request_arrival(self, req: Request, now: float) -> bool:
        """Register a call; True if it must wait outside the engine until its session is admitted."""
        ctx = self.ctx
        ctx.now = now
        s = ctx.sessions.get(req.session_id)
        moved_here = False
        if s is None:
            s = ctx.sessions[req.session_id] = Session(req.session_id, now, req.prompt_tokens)
            # Not its first call: the session started on another replica (failover, or a router
            # without affinity). Gating it again here would park it once at every replica it touches.
            moved_here = req.turn_index > 0 and self.admission is not None
        if self.held:
            for ev in self.held.take(req.session_id, now):    # (tool plane and retention saw them)
                self._session_event(s, ev)         # a session new here holds no pin to release
        if req.turn_index > s.turn_index + 1 and s.turn_index >= 0:
            s.roaming = True                   # its calls in between went to other replicas
        s.turn_index = max(s.turn_index, req.turn_index)
        inferred = self.boundaries.end(req.session_id, now)
        if inferred is not None:
            self.retention.observe(inferred, ctx)
        if s.turns_finished:
            observe_turn_growth(ctx, s, req.prompt_tokens)
            observe_return_gap(ctx, s, now)
        s.turns += 1
        s.prompt_tokens = req.prompt_tokens
        s.prompt_hit_tokens = req.cached_tokens
        s.in_tool = None
        # Its tools are over, whatever their finish events say: those reach an engine late (0.1-0.3 s
        # on average, up to seconds, behind the HTTP hop), and counted until then the calls in
        # flight read a host busier than it is.
        self.tools.forget(req.session_id, ctx.cpu)
        self.ordering.on_arrival(req, ctx)
        if self.admission is not None:
            self.admission.on_arrival(req, ctx)
        if not s.admitted and (self.admission is None or moved_here):
            ctx.slots.admit(s, now)
            if moved_here and self.admission is not None:
                self.admission.rejoin(s, ctx)
        elif s.admitted and self.admission is not None and self.admission.hold(s, ctx):
            ctx.slots.withdraw(s)                  # paused: this call waits for re-admission
        elif s.admitted and not s.holds_slot:      # back after an idle release: count it again
            ctx.slots.take(s)
            if self.admission is not None:
                self.admission.rejoin(s, ctx)
        return not s.admitted

    def resume_pin(self, session_id: str) -> Pin | None:
        """The pin to release now that the session's next call is in the engine, if any."""
        return self.retention.resumed(session_id, self.ctx)

    @property
    def max_active(self) -> int | None:
        """Active-window size of the engine (running + waiting); see `Ordering.max_active`."""
        return self.ordering.max_active

    @property
    def admission_interval_s(self) -> float | None:
        """Seconds between control-plane evaluations in `admit`; None: no admission control."""
        return None if self.admission is None else self.admission.interval_s

    @property
    def next_tick_s(self) -> float:
        """When `admit` next re-evaluates the control plane (-inf before the first call)."""
        return self._next_tick

    @property
    def admission_window(self) -> int | None:
        """The admission window right now (telemetry); None without admission control."""
        return None if self.admission is None else self.admission.window

    @property
    def liveness_bound_s(self) -> float | None:
        """Longest an engine may sit idle while calls are parked, if the control plane promises a
        bound right now (None: no promise, e.g. ThunderAgent's 5 s resume ticks)."""
        if self.admission is None:
            return 0.0
        return self.admission.liveness_bound_s(self.ctx)

    def session(self, session_id: str) -> Session | None:
        """The policy's view of a session (None once it ended or was forgotten)."""
        return self.ctx.sessions.get(session_id)

    def admit(self, backlog: Sequence[Session], now: float) -> list[Session]:
        """Admit parked sessions (arrival order in `backlog`) as the control plane allows."""
        self.ctx.now = now
        if self.admission is None:
            chosen = list(backlog)
        else:
            if now >= self._next_tick:
                if self.idle.due(now):
                    self.release_idle(now)
                self.admission.tick(self.ctx)
                self._next_tick = now + self.admission.interval_s
            chosen = self.admission.select(backlog, self.ctx) if backlog else []
        for s in chosen:
            self.ctx.slots.admit(s, now)
        return chosen

    def release_idle(self, now: float) -> list[Session]:
        """Give back the window slots of silent sessions, forget long-silent ones (`core.idle`);
        returns the sessions released."""
        released, forgotten = self.idle.scan(self.ctx, now)
        for sid in forgotten:
            self.tools.forget(sid, self.ctx.cpu)
        return released

    # ---- one engine step ---------------------------------------------------------------------

    def observe_kv(self, free_blocks: int, waiting_demand_blocks: int | None = None,
                   revocable_blocks: int | None = None) -> None:
        """GPU-plane state an engine reports every step (None: keep the last value); the pinned
        blocks are the policy's own count, the prefill-start latency its own EMA
        (`observe_prefill_start`)."""
        kv = self.ctx.kv
        kv.free_blocks = free_blocks
        kv.pinned_blocks = self.ctx.pins.total_blocks
        if revocable_blocks is not None:
            kv.revocable_blocks = revocable_blocks
        if waiting_demand_blocks is not None:
            kv.waiting_demand_blocks = waiting_demand_blocks
        self.prefill_start.publish(kv)

    def observe_prefill_start(self, wait_s: float) -> None:
        """A call got its first prefill chunk `wait_s` after it entered the engine's queues
        (the EMA starts from 0; it reaches the context at the next `observe_kv`)."""
        self.prefill_start.observe(wait_s)

    @property
    def pinned_sessions(self) -> int:
        """Sessions holding a pin (an engine skips pin work when there are none)."""
        return len(self.ctx.pins)

    def pin(self, session_id: str) -> Pin | None:
        return self.ctx.pins.get(session_id)

    def pins(self) -> list[Pin]:
        return list(self.ctx.pins)

    def expired_pins(self, now: float) -> list[Pin]:
        self.ctx.now = now
        return self.ctx.pins.pop_expired(now)

    def sort_key(self, now: float) -> Callable[[Request], SortKey]:
        """The order at `now` as a sort key (smaller first), for engines that keep a queue sorted
        and place a newcomer by its key instead of re-sorting; `order` uses it too."""
        self.ctx.now = now
        key, ctx = self.ordering.key, self.ctx
        return lambda r: key(r, ctx)

    def keys(self, requests: Iterable[Request], now: float) -> list[SortKey]:
        """`sort_key(now)` of each request, in one pass (for an engine that sorts its own objects;
        `map` calls the key without an interpreted loop: this runs at every engine step)."""
        self.ctx.now = now
        return list(map(self.ordering.key, requests, repeat(self.ctx)))

    def order(self, requests: Sequence[Request], now: float, by_priority: bool = False) -> list[Request]:
        """`requests` in the order to serve them. `by_priority` (vLLM's `--scheduling-policy
        priority`): request priority first (smaller first), then the ordering's key; a stock
        ordering is then exactly vLLM's priority order (`vllm_priority_key`)."""
        if not by_priority:
            keys = self.keys(requests, now)
            return [requests[i] for i in sorted(range(len(requests)), key=keys.__getitem__)]
        if self.ordering.stock:
            return sorted(requests, key=vllm_priority_key)
        key = self.sort_key(now)
        return sorted(requests, key=lambda r: (r.priority, *key(r)))

    @property
    def stock_order(self) -> bool:
        """The order is vLLM's own request FCFS: an engine may keep its native queues as they are."""
        return self.ordering.stock

    @property
    def stock_victim(self) -> bool:
        """Victims are vLLM's own too (the newest under request FCFS): an engine may take its own."""
        return self.ordering.stock and type(self.victim) is NewestVictim

    def chunk_tokens(self, req: Request, budget: int, remaining: int | None = None) -> int:
        """Tokens to schedule for `req` this step within `budget`: 1 for a decode, else a prefill
        chunk capped by the ordering's quantum.

        `remaining`: tokens the engine would still compute for `req`, outputs included (all that
        is left, or what it would schedule now). Past the prompt `req` alone cannot tell a decode
        from a resumed request recomputing its own outputs after preemption; more than one token
        left is such a recompute, a prefill chunk too.
        """
        prefill = req.prompt_tokens - req.computed_tokens     # (`is_prefill`, `prefill_remaining`)
        if prefill > 0:
            n = min(prefill, budget)
        elif remaining is not None and remaining > 1:
            n = min(remaining, budget)
        else:
            return min(1, budget)
        quantum = self.ordering.prefill_quantum(req, self.ctx)
        return n if quantum is None else min(n, quantum)

    def steady_chunk(self, req: Request) -> int | None:
        """The chunk `req`'s prefill gets at every step while every running request is served at
        every step, if the ordering promises one (`Ordering.steady_quantum`); None otherwise."""
        return self.ordering.steady_quantum(req)

    def shrink(self, tokens: int, room_tokens: int | None = None) -> int | None:
        return self.chunking.shrink(tokens, self.ctx.kv.block_size, room_tokens)

    def revocation_order(self) -> list[Pin]:
        return self.retention.revocation_order(list(self.ctx.pins), self.ctx)

    def release_pin(self, session_id: str) -> Pin | None:
        return self.ctx.pins.pop(session_id)

    def release_all_pins(self) -> list[Pin]:
        """Drop every pin (a prefix-cache reset); the engine frees their blocks."""
        pins = self.ctx.pins
        return [p for p in (pins.pop(pin.session_id) for pin in pins) if p is not None]

    def choose_victim(self, candidates: Sequence[Request], by_priority: bool = False) -> Request:
        """The running request to preempt. `by_priority`: only the lowest priority class (largest
        value) yields, as in vLLM; with stock victims, its latest arrival (vLLM's own rule)."""
        if not candidates:
            raise ValueError("choose_victim: no candidates")
        if by_priority:
            worst = max(r.priority for r in candidates)
            candidates = [r for r in candidates if r.priority == worst]
            if self.stock_victim:
                return max(candidates, key=lambda r: vllm_priority_key(r)[:2])
        return self.victim.choose(candidates, self.ctx)

    def on_preempted(self, req: Request, now: float) -> None:
        self.ctx.now = now
        req.preemptions += 1
        req.preempted_s = now
        self.ctx.preemptions += 1
        self.ordering.on_preempted(req, self.ctx)

    def on_step(self, scheduled: Sequence[tuple[Request, int]], waiting: Sequence[Request],
                now: float) -> None:
        ctx = self.ctx
        ctx.now = now
        ctx.running_requests = len(scheduled)
        for req, tokens in scheduled:
            req.attained_tokens += tokens
            req.last_scheduled_s = now
            req.started = True
            if req.preempted_s >= 0.0:
                self.retention.on_readmitted(req, now - req.preempted_s, ctx)
                req.preempted_s = -1.0
        self.ordering.on_step(scheduled, waiting, ctx)

    def on_steps(self, scheduled: Sequence[tuple[Request, int]], waiting: Sequence[Request],
                 last_s: float, now: float) -> None:
        """`on_step` for a run of steps whose last one started at `last_s`, told at `now` (an
        engine that ran steps of steady chunks in one go: `steady_chunk`)."""
        self.on_step(scheduled, waiting, last_s)
        self.ctx.now = now

    def observe_prefill(self, tokens: int, seconds: float, alpha: float = PREFILL_RATE_EMA) -> None:
        """Feed a measured prefill (tokens computed in `seconds`) into the prefill-rate EMA."""
        observe_prefill_rate(self.ctx, tokens, seconds, alpha)

    # ---- finishing a call ---------------------------------------------------------------------

    def on_request_finished(self, req: Request, blocks: int, now: float) -> FinishDecision:
        """Account the call; say which pins to drop and whether to pin its `blocks` full blocks."""
        ctx = self.ctx
        ctx.now = now
        decision = FinishDecision()
        s = ctx.sessions.get(req.session_id)
        if s is None:
            return decision
        observe_recompute(ctx, s, req)
        s.turns_finished += 1
        s.service_tokens += req.attained_tokens
        s.context_tokens = req.context_tokens
        s.last_turn_finished_s = now
        self.ordering.on_finished(req, ctx)
        if self.admission is not None:
            self.admission.on_finished(req, ctx)
        if req.sessionless:
            decision.release.extend(self._end_session(s))
            return decision
        if not self.retention.release_on_resume:
            decision.release.extend(self._pop_pin(req.session_id))
        if (self.admission is not None and s.admitted and s.turns == s.turns_finished
                and self.admission.suspend(s, ctx)):
            # Paused at its turn boundary: the next call waits outside; its KV is not kept for it.
            ctx.slots.withdraw(s)
            decision.release.extend(self._pop_pin(s.session_id))
            return decision
        decision.pin = self.retention.offer(s, req.context_tokens, blocks, ctx, self.max_pinned_fraction)
        return decision

    def record_pin(self, session_id: str, blocks: int, offer: PinOffer, now: float,
                   handle: object = None) -> Pin:
        pin = Pin(session_id, blocks, now, now + offer.ttl_s, offer.value_density, handle)
        self.ctx.pins.add(pin)
        return pin

    def hint_tool(self, session_id: str, hint: ToolStarted) -> bool:
        """A tool call the engine inferred from a finished call's output (no event came yet);
        False if the session is unknown or a tool-started event already arrived."""
        s = self.ctx.sessions.get(session_id)
        if s is None or s.in_tool is not None:
            return False
        s.in_tool = hint
        return True

    # ---- boundary events and telemetry -------------------------------------------------------

    def on_event(self, ev: Event) -> list[Pin]:
        """Apply one event from either plane; returns the pins the engine must release now."""
        ctx = self.ctx
        ctx.now = max(ctx.now, getattr(ev, "t", ctx.now))
        release: list[Pin] = []
        if isinstance(ev, EngineTelemetry):
            ctx.kv.update(ev)
        elif isinstance(ev, CpuTelemetry):
            ctx.cpu.update(ev)
        elif isinstance(ev, SessionEvent):
            if is_inferred(ev):
                if not self.ignores(ev) and self.boundaries.start(ev):
                    self._infer_tool(ctx.sessions[ev.session_id], ev)
                return release
            # The tool plane and the learnt tool times take every tool at once; what concerns the
            # session itself waits for the session if this engine has not seen it yet.
            if isinstance(ev, (ToolStarted, ToolFinished, ToolCancelled)):
                self.tools.observe(ev, ctx.cpu)
            if isinstance(ev, (ToolStarted, ToolFinished, ToolCancelled, SessionEnded)):
                self.boundaries.real_event(ev)
            s = ctx.sessions.get(ev.session_id)
            if not (s is None and isinstance(ev, (ToolStarted, ToolFinished, ToolCancelled))
                    and self.held.hold(ev, ctx.now)):     # held: applied at the session's next call
                release.extend(self._session_event(s, ev))
        self.retention.observe(ev, ctx)
        return release

    def _session_event(self, s: Session | None, ev: SessionEvent) -> list[Pin]:
        """What a session event changes for its session (None: unknown here); pins to release."""
        if s is not None and isinstance(ev, (ToolStarted, ToolFinished, ToolCancelled)):
            s.reports_tools = True
        if isinstance(ev, ToolStarted):
            if s is not None:
                s.in_tool = ev
                self.retention.reprice_held(s, self.ctx)
        elif isinstance(ev, (ToolFinished, ToolCancelled)):
            if s is not None:
                s.in_tool = None
            if isinstance(ev, ToolCancelled):
                return self._pop_pin(ev.session_id)
        elif isinstance(ev, SessionEnded):
            return self._end_session(s) if s is not None else self._pop_pin(ev.session_id)
        return []

    def ignores(self, ev: Event) -> bool:
        """True for an event that would change nothing: an inferred tool start of a session that is
        unknown, has a call in the engine, declared its tool or sends its own events (an engine
        need not record it)."""
        if not is_inferred(ev):
            return False
        s = self.ctx.sessions.get(ev.session_id)
        return (s is None or s.turns != s.turns_finished or s.in_tool is not None
                or self.boundaries.evented(ev.session_id))

    def _infer_tool(self, s: Session, ev: ToolStarted) -> None:
        """An inferred tool start (between two calls of a session that sends no events and declared
        no tool): priced and learnt like a real one, never counted on the tool plane."""
        s.in_tool = ev
        self.retention.reprice_held(s, self.ctx)
        self.retention.observe(ev, self.ctx)

    def _end_session(self, s: Session) -> list[Pin]:
        """Forget an ended session; its pin, if any, is returned for the engine to release."""
        ctx = self.ctx
        pins = self._pop_pin(s.session_id)
        self.boundaries.forget(s.session_id)
        self.tools.forget(s.session_id, ctx.cpu)
        self.retention.on_session_ended(s, ctx)
        ctx.slots.give_back(s)
        s.ended = True
        ctx.sessions.pop(s.session_id, None)
        return pins

    def _pop_pin(self, session_id: str) -> list[Pin]:
        """The session's pin taken out of the table, as a list of what the engine must release."""
        pin = self.ctx.pins.pop(session_id)
        return [pin] if pin is not None else []

    def stats(self) -> dict[str, StatValue | Stats]:
        ctx = self.ctx
        return {"policy": self.name, "admitted_sessions": ctx.admitted_active,
                "known_sessions": len(ctx.sessions), "pinned_sessions": len(ctx.pins),
                "pinned_blocks": ctx.pins.total_blocks, "revocable_blocks": ctx.kv.revocable_blocks,
                "tools_in_flight": ctx.cpu.tools_in_flight,
                "tool_workers": ctx.cpu.tool_workers, "ema_tool_queue_wait_s": ctx.cpu.ema_queue_wait_s,
                "kv_usage": ctx.kv.usage,
                "admission": self.admission.stats() if self.admission else {"window": None},
                "boundaries": {**self.boundaries.stats(), **self.held.stats()}}
