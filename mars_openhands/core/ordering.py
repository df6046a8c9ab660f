"""Ordering strategies (priority coordinators): FCFS, MARS' MLFQ, Autellix' PLAS, Continuum's
program-level FCFS.

`key()` runs for every request every engine step, so each key is O(1): no allocation beyond the
returned tuple, no scan over other requests. Work that depends on the whole step (Autellix' wait
counters) is settled lazily from one engine-wide counter.
"""
from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from mars_openhands.core.context import PolicyContext
from mars_openhands.core.model import Request
from mars_openhands.core.strategies import Ordering, SortKey

#: MARS / Autellix level boundaries (tokens) and per-level prefill quanta (docs/policies.md "MLFQ", "autellix").
LEVEL_BOUNDS: tuple[int, int, int] = (2048, 8192, 32768)
LEVEL_QUANTA: tuple[int, int, int, int] = (2048, 1024, 512, 256)


def size_level(tokens: int, bounds: Sequence[int] = LEVEL_BOUNDS) -> int:
    """MARS level of a prefill of `tokens` (<= 2048 -> 0, <= 8192 -> 1, <= 32768 -> 2, else 3)."""
    return bisect_left(bounds, tokens)


def vllm_priority_key(req: Request) -> tuple[int, float, str]:
    """vLLM's priority order (`Request.__lt__`): priority (smaller first), then the request's own
    arrival time, then its id. The order of every stock ordering under `--scheduling-policy
    priority`; its first two items rank preemption victims there (the largest yields)."""
    stamp = req.arrival_time
    return (req.priority, req.arrival_s if stamp is None else stamp, req.request_id)


class FcfsOrdering(Ordering):
    """vLLM's default: first come, first served per request; no prefill quantum."""

    stock = True

    def key(self, req: Request, ctx: PolicyContext) -> SortKey:
        return (req.arrival_s,)


@dataclass(frozen=True, slots=True)
class MlfqConfig:
    """MARS internal scheduler constants (docs/policies.md "MLFQ"; preview defaults)."""

    level_bounds: tuple[int, ...] = LEVEL_BOUNDS
    quanta: tuple[int, ...] = LEVEL_QUANTA
    aging_s: float = 30.0
    #: Internal active window: the engine keeps at most this many requests (running + waiting)
    #: and parks the rest in an FCFS overflow queue (preview: `_mars_active_window_size`, 30).
    #: None: as large as the admission window's W_max (one call per admitted session).
    max_active: int | None = None

    def __post_init__(self) -> None:
        if len(self.quanta) != len(self.level_bounds) + 1 or min(self.quanta) <= 0:
            raise ValueError("MlfqConfig.quanta: need one positive quantum per level "
                             f"({len(self.level_bounds) + 1}), got {self.quanta!r}")
        if self.aging_s <= 0:
            raise ValueError(f"MlfqConfig.aging_s: must be > 0, got {self.aging_s!r}")


class MlfqOrdering(Ordering):
    """MARS' agent-centric MLFQ.

    - base level = max(feedback level, level of the uncached prefill still to do): an agent's next
      turn whose context is a warm prefix is a short job, which is the point of MARS;
    - a prefill step that used its level's whole quantum with prefill left demotes one level
      (feedback, max L3); decode is L0;
    - aging: effective level = base - floor(time since last scheduled (or arrival) / 30 s), >= 0;
    - a preempted request is L0 and sorts before everything until it is scheduled again;
    - key = (effective level, last scheduled, arrival): least recently served first in a level;
    - the quantum binds only while another call shares the step: after a step with no decode in
      it that left no call waiting, a prefill's chunk is bounded by the step budget alone (a
      chunk that reaches the quantum still demotes). A quantum that shares the step with nobody
      only stretches a long prefill over more steps, and the blocks its unbuilt context will
      need go meanwhile to later admissions, which then preempt it (docs/policies.md "MLFQ").

    `req.level` holds the feedback level; `req.quantum_left` the quantum granted this step.
    Demotion compares the chunk with the prefill left when the chunk was sized, so it does not
    matter whether the engine reports the step before or after advancing its counters.
    """

    def __init__(self, config: MlfqConfig = MlfqConfig()) -> None:
        self.config = config
        self.max_active = config.max_active
        self._bounds = config.level_bounds
        self._quanta = config.quanta
        self._top = len(config.quanta) - 1
        self._aging = config.aging_s
        #: computed tokens of each request when its chunk was sized this step (see on_step)
        self._chunk_start: dict[Request, int] = {}
        #: another call shared the last step (see on_step; before the first step: assume so)
        self._contended = True

    def base_level(self, req: Request) -> int:
        """Level before aging; the preemption-victim rule ranks by it."""
        if req.computed_tokens >= req.prompt_tokens:
            return 0
        level = size_level(req.uncached_prefill, self._bounds)
        return req.level if req.level > level else level

    def effective_level(self, req: Request, now: float) -> int:
        if req.preempted_s >= 0.0:
            return 0
        level = self.base_level(req)
        if level:
            level -= int((now - (req.last_scheduled_s if req.started else req.arrival_s)) // self._aging)
            if level < 0:
                return 0
        return level

    def key(self, req: Request, ctx: PolicyContext) -> SortKey:
        # effective_level inlined: this runs for every request every engine step
        if req.preempted_s >= 0.0:
            return (0, -math.inf, req.arrival_s)
        last = req.last_scheduled_s if req.started else req.arrival_s
        if req.computed_tokens >= req.prompt_tokens:
            return (0, last, req.arrival_s)
        level = bisect_left(self._bounds, req.uncached_prefill)
        if req.level > level:
            level = req.level
        if level:
            level -= int((ctx.now - last) // self._aging)
            if level < 0:
                level = 0
        return (level, last, req.arrival_s)

    def prefill_quantum(self, req: Request, ctx: PolicyContext) -> int | None:
        q = self._quanta[self.effective_level(req, ctx.now)]
        req.quantum_left = q
        self._chunk_start[req] = req.computed_tokens
        return q if self._contended else None

    def steady_quantum(self, req: Request) -> int | None:
        # At the bottom level a prefill served at every step neither ages nor demotes: its key is
        # (top, last step, arrival) like every other running request's, and its quantum the last
        # (while another call shares the step: the queue empties only by an admission and a
        # decode leaves only by finishing, which end such a run).
        if (self._contended and req.level == self._top and req.preempted_s < 0.0
                and req.computed_tokens < req.prompt_tokens):
            return self._quanta[self._top]
        return None

    def on_arrival(self, req: Request, ctx: PolicyContext) -> None:
        req.level = 0

    def on_step(self, scheduled: Sequence[tuple[Request, int]], waiting: Sequence[Request],
                ctx: PolicyContext) -> None:
        starts = self._chunk_start
        # Anyone else in the step: a call left waiting, or a decode (a call whose chunk was not
        # sized as a prefill), which a longer chunk would slow down.
        self._contended = bool(waiting) or any(req not in starts for req, _ in scheduled)
        if starts:
            top, granted = self._top, dict(scheduled)    # (a few chunks among many decodes)
            for req, start in starts.items():
                tokens = granted.get(req)
                if (tokens is not None and req.quantum_left <= tokens and req.level < top
                        and req.prompt_tokens - start - tokens > 0):
                    req.level += 1
            starts.clear()
        for req, _ in scheduled:               # decode is L0
            if req.level and req.computed_tokens >= req.prompt_tokens:
                req.level = 0

    def on_preempted(self, req: Request, ctx: PolicyContext) -> None:
        req.level = 0


@dataclass(frozen=True, slots=True)
class PlasConfig:
    """Autellix PLAS as MARS re-implements it (docs/policies.md "autellix"; preview constants)."""

    service_bounds: tuple[int, ...] = LEVEL_BOUNDS
    quanta: tuple[int, ...] = LEVEL_QUANTA
    beta: float = 2.0

    def __post_init__(self) -> None:
        if len(self.quanta) != len(self.service_bounds) + 1 or min(self.quanta) <= 0:
            raise ValueError("PlasConfig.quanta: need one positive quantum per level, "
                             f"got {self.quanta!r}")
        if self.beta <= 0:
            raise ValueError(f"PlasConfig.beta: must be > 0, got {self.beta!r}")


class PlasOrdering(Ordering):
    """Autellix' program-level attained service (PLAS) with MLFQ levels and anti-starvation.

    - a call enters at the level of its program's attained service (tokens its earlier calls
      consumed, recomputes included): < 2048 -> L0, < 8192 -> L1, < 32768 -> L2, else L3;
    - a level's quantum (2048/1024/512/256 tokens) is spent across steps; a step that exhausts it
      with prefill left demotes one level (max L3) and grants the next level's quantum;
    - wait = tokens scheduled for other requests while this one got none (program wait of earlier
      calls + this call's); when (program wait + call wait) / (program service + call service)
      >= beta = 2, the call is promoted to L0 and its own wait restarts;
    - key = (level, arrival).

    Waits are settled lazily: `_scheduled` counts every token the engine scheduled, and a call's
    wait is its settled wait plus what was scheduled since `req.wait_mark`.
    """

    def __init__(self, config: PlasConfig = PlasConfig()) -> None:
        self.config = config
        self._quanta = config.quanta
        self._top = len(config.quanta) - 1
        self._scheduled = 0
        self._chunk_start: dict[Request, int] = {}

    def service_level(self, service: int) -> int:
        for level, bound in enumerate(self.config.service_bounds):
            if service < bound:
                return level
        return self._top

    def wait_tokens(self, req: Request) -> int:
        """This call's wait so far (settled + unsettled)."""
        return req.wait_tokens + self._scheduled - req.wait_mark

    def _maybe_promote(self, req: Request, ctx: PolicyContext) -> None:
        s = ctx.sessions.get(req.session_id)
        if s is None:
            return
        service = s.service_tokens + req.attained_tokens
        if service > 0 and (s.wait_tokens + self.wait_tokens(req)) >= self.config.beta * service:
            req.level = 0
            req.quantum_left = self._quanta[0]
            req.wait_tokens, req.wait_mark = 0, self._scheduled

    def key(self, req: Request, ctx: PolicyContext) -> SortKey:
        if req.level:
            self._maybe_promote(req, ctx)
        return (req.level, req.arrival_s)

    def prefill_quantum(self, req: Request, ctx: PolicyContext) -> int | None:
        if req.level:
            self._maybe_promote(req, ctx)
        if req.quantum_left <= 0:
            req.quantum_left = self._quanta[req.level]
        self._chunk_start[req] = req.computed_tokens
        return req.quantum_left

    def on_arrival(self, req: Request, ctx: PolicyContext) -> None:
        s = ctx.sessions.get(req.session_id)
        req.level = self.service_level(s.service_tokens if s is not None else 0)
        req.quantum_left = self._quanta[req.level]
        req.wait_tokens, req.wait_mark = 0, self._scheduled

    def on_step(self, scheduled: Sequence[tuple[Request, int]], waiting: Sequence[Request],
                ctx: PolicyContext) -> None:
        before, starts = self._scheduled, self._chunk_start
        after = before + sum(tokens for _, tokens in scheduled)
        for req, tokens in scheduled:
            req.wait_tokens += before - req.wait_mark
            req.wait_mark = after
            start = starts.get(req)
            if start is not None:     # a prefill chunk; decode steps spend no quantum
                left = req.quantum_left - tokens
                if left <= 0 and req.level < self._top and req.prompt_tokens - start - tokens > 0:
                    req.level += 1
                    left = self._quanta[req.level]
                req.quantum_left = left
        starts.clear()
        self._scheduled = after

    def on_finished(self, req: Request, ctx: PolicyContext) -> None:
        s = ctx.sessions.get(req.session_id)
        if s is not None:
            s.wait_tokens += self.wait_tokens(req)


class ProgramFcfsOrdering(Ordering):
    """Continuum: program-level FCFS (the session's first arrival), sessions holding a pin first."""

    def key(self, req: Request, ctx: PolicyContext) -> SortKey:
        s = ctx.sessions.get(req.session_id)
        first = s.first_arrival_s if s is not None else req.arrival_s
        return (ctx.pins.get(req.session_id) is None, first, req.arrival_s)
