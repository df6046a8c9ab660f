"""The five strategy roles a policy is composed of.

Each role is a small abstract class with one decision; a named policy (see `registry.py`) is a
choice of one object per role. Strategies read the shared `PolicyContext` and never the future.
Hooks default to no-ops so a strategy implements only what its rule needs.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mars_openhands.core.model import Pin, PinOffer, Request, Session
from mars_openhands.events import Event

if TYPE_CHECKING:
    from mars_openhands.core.context import PolicyContext

#: An ordering's sort key: smaller is served first (numbers and flags compared in turn).
SortKey = tuple[float, ...]
#: One telemetry value (`/mars/v1/stats`, simulator traces): a JSON scalar.
StatValue = str | int | float | bool | None
#: Telemetry of a strategy by name.
Stats = dict[str, StatValue]


class Ordering(ABC):
    """Priority coordinator: who is served first, and how many prefill tokens per step."""

    #: Most requests the engine keeps in its active set (running + waiting); later arrivals wait in
    #: an FCFS overflow queue and enter as room frees up. None = unbounded (vLLM's default).
    max_active: int | None = None
    #: The order is vLLM's own request FCFS: an engine may keep its native queues as they are, and
    #: under vLLM's priority policy it is vLLM's priority order (`ordering.vllm_priority_key`).
    stock: bool = False

    @abstractmethod
    def key(self, req: Request, ctx: PolicyContext) -> SortKey:
        """Sort key; smaller is served first. Used for running and waiting requests alike."""

    def prefill_quantum(self, req: Request, ctx: PolicyContext) -> int | None:
        """Most prefill tokens `req` may get this step; None = only the engine's budget limits it."""
        return None

    def steady_quantum(self, req: Request) -> int | None:
        """The quantum `req`'s prefill gets at every step while it is scheduled at every step, if
        that quantum, the order and `on_step` do not change with its progress (an engine may then
        run such steps in one go and report them as one `on_step`); None: no such promise."""
        return None

    def on_arrival(self, req: Request, ctx: PolicyContext) -> None:
        """A request reached the engine (its session is in ctx.sessions)."""

    def on_step(self, scheduled: Sequence[tuple[Request, int]], waiting: Sequence[Request],
                ctx: PolicyContext) -> None:
        """After a step: `scheduled` got (request, tokens) of service; `waiting` got none.
        Engines may call it before (simulator) or after (vLLM) advancing `computed_tokens`, so
        a rule must not read progress from it: remember what `prefill_quantum` saw instead."""

    def on_preempted(self, req: Request, ctx: PolicyContext) -> None:
        """`req` lost its KV (recompute later)."""

    def on_finished(self, req: Request, ctx: PolicyContext) -> None:
        """`req` finished; its session's service was already updated by the context."""


class ChunkSizer(ABC):
    """What to try when a prefill chunk cannot get KV blocks, before anyone is preempted."""

    @abstractmethod
    def shrink(self, tokens: int, block_size: int, room_tokens: int | None = None) -> int | None:
        """A smaller chunk to retry with, or None to give up (then the engine preempts).

        `room_tokens`: the engine's estimate of the most new tokens the request's blocks and the
        free blocks hold now (None: unknown)."""


class VictimSelector(ABC):
    """Which running request loses its KV when a higher-priority one cannot get blocks."""

    @abstractmethod
    def choose(self, candidates: Sequence[Request], ctx: PolicyContext) -> Request:
        """Pick one of `candidates` (never empty) to preempt."""


class Retention(ABC):
    """KV retention while a session's tool runs: pin or not, for how long, what to revoke first."""

    #: True: a pin is released when the session's next call arrives (its prefix hit takes over).
    #: False: released when that next call finishes (Continuum); the facade then holds the pin
    #: past its TTL while that call is queued or running.
    release_on_resume: bool = True

    @abstractmethod
    def pin_ttl(self, session: Session, context_tokens: int, blocks: int,
                ctx: PolicyContext) -> PinOffer | None:
        """Whether and how long to keep `blocks` pinned after `session`'s call finished."""

    def reprice(self, pin: Pin, session: Session, ctx: PolicyContext) -> float | None:
        """New expiry for an existing pin when new information arrived (a tool-started hint,
        pressure change); None keeps it."""
        return None

    def revocation_order(self, pins: Sequence[Pin], ctx: PolicyContext) -> list[Pin]:
        """Order in which pins are dropped when a request cannot get blocks."""
        return sorted(pins, key=lambda p: (p.value_density, -p.pinned_s))

    def offer(self, session: Session, context_tokens: int, blocks: int, ctx: PolicyContext,
              max_pinned_fraction: float) -> PinOffer | None:
        """`pin_ttl` for a session that holds no pin yet, if `blocks` fit the pin budget (at most
        `max_pinned_fraction` of all blocks pinned) and the TTL is positive."""
        if blocks > 0 and not session.ended and ctx.pins.get(session.session_id) is None:
            budget = max_pinned_fraction * ctx.kv.total_blocks - ctx.pins.total_blocks
            if blocks <= budget:
                offer = self.pin_ttl(session, context_tokens, blocks, ctx)
                if offer is not None and offer.ttl_s > 0:
                    return offer
        return None

    def resumed(self, session_id: str, ctx: PolicyContext) -> Pin | None:
        """The session's next call is in the engine: its pin to release now, if any (with
        `release_on_resume` off the pin is held instead until that call finishes)."""
        if self.release_on_resume:
            return ctx.pins.pop(session_id)
        pin = ctx.pins.get(session_id)
        if pin is not None:
            pin.expires_s = math.inf     # held until that call finishes (`Policy.on_request_finished`)
        return None

    def reprice_held(self, session: Session, ctx: PolicyContext) -> None:
        """`reprice` the session's pin, if it holds one."""
        pin = ctx.pins.get(session.session_id)
        if pin is not None:
            expires = self.reprice(pin, session, ctx)
            if expires is not None:
                pin.expires_s = expires

    def observe(self, event: Event, ctx: PolicyContext) -> None:
        """Learn from a boundary event (tool durations, pressure changes...)."""

    def on_readmitted(self, req: Request, delay_s: float, ctx: PolicyContext) -> None:
        """A preempted request got service again `delay_s` after it lost its KV."""

    def on_session_ended(self, session: Session, ctx: PolicyContext) -> None:
        """`session` ended (called before it is forgotten: its turn counts are still there)."""


class Admission(ABC):
    """External control plane: which new sessions may start now."""

    #: Seconds between control-loop evaluations.
    interval_s: float = 0.2
    #: Sessions the rule lets in at once right now (telemetry); None: the rule has no such window.
    window: int | None = None

    def on_arrival(self, req: Request, ctx: PolicyContext) -> None:
        """A call reached the policy, before it is admitted or parked (a proxy in front of the
        engine sees every call; ThunderAgent counts its program's tokens from it)."""

    def on_finished(self, req: Request, ctx: PolicyContext) -> None:
        """A call finished, before `suspend` is asked about its session."""

    def tick(self, ctx: PolicyContext) -> None:
        """Re-evaluate pressure and the window from ctx.kv / ctx.cpu."""

    @abstractmethod
    def select(self, backlog: Sequence[Session], ctx: PolicyContext) -> list[Session]:
        """From the not-yet-admitted sessions (arrival order), those to admit now, in order."""

    def liveness_bound_s(self, ctx: PolicyContext) -> float | None:
        """Longest the engine may idle while sessions are parked, if this rule promises one now."""
        return None

    def hold(self, session: Session, ctx: PolicyContext) -> bool:
        """A call of admitted `session` arrived: True to pause the session (the facade un-admits
        it; this call and later ones are parked until `select` admits it again)."""
        return False

    def rejoin(self, session: Session, ctx: PolicyContext) -> None:
        """Admitted `session`, whose slot went back while it was silent, is back with a call: it
        counts against the limits again."""

    def suspend(self, session: Session, ctx: PolicyContext) -> bool:
        """`session`'s call finished and none is left in the engine: True to pause it there (as
        `hold`, and its KV is not kept for it)."""
        return False

    def stats(self) -> Stats:
        """Window and pressure state for telemetry (`/mars/v1/stats`, simulator traces)."""
        return {}
