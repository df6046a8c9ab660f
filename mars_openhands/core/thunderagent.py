"""ThunderAgent (Kang et al., 2026): a proxy in front of stock vLLM that pauses and resumes whole
programs at tool boundaries against a token budget of the KV cache.

A program is a session. The proxy counts each program's tokens: the prompt of its current call
while the call is out (REASONING), prompt + output of its last call between calls (ACTING). It
registers programs against the cache's token capacity:

    remaining = total_blocks x block_size - (REASONING + 1.0 x ACTING tokens + 100 x registered)

- A new program enters at once iff the global queue is empty and remaining >= its tokens + 100;
  otherwise it waits in the queue. A registered program's next call is never held.
- Every 5 s the scheduler (1) resumes queued programs: groups (next call waiting, step > 1),
  then new programs, then programs with no call waiting, each by its tokens when queued, smallest
  first; first fit of tokens + 100 into `remaining`; (2) while remaining < 0, pauses the ACTING
  program with the fewest tokens (it leaves the count and joins the queue; its next call waits
  there); with none left, marks every REASONING program, each paused when its call finishes
  (marking does not change `remaining`, so the loop marks them all).
- A call that has waited 1800 s is resumed regardless.

Pausing never touches the engine: the program's KV stays in vLLM's prefix cache as any finished
call's does and is a hit on resume if nothing evicted it. The only engine signal is the cache's
total size; ThunderAgent polls vLLM's /metrics, but no decision reads it (its shared-token
correction is never updated), so none here does. Token counts are exact prompt sizes here, where
ThunderAgent estimates them from the request's characters (a calibrated ratio) and learns the
output size from the response (non-streaming, as its OpenHands integration runs).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mars_openhands.core.context import PolicyContext
from mars_openhands.core.model import Request, Session
from mars_openhands.core.strategies import Admission, Stats


@dataclass(frozen=True, slots=True)
class ThunderAgentConfig:
    """ThunderAgent's defaults (its CLI and `backend/state.py`)."""

    interval_s: float = 5.0            # --scheduler-interval
    buffer_per_program: int = 100      # BUFFER_PER_PROGRAM, decode headroom per registered program
    acting_token_weight: float = 1.0   # --acting-token-weight
    #: --use-acting-token-decay: for resuming only, an ACTING program counts tokens x 2^-t
    #: (t = seconds since its call finished) instead of the acting weight.
    acting_token_decay: bool = False
    resume_timeout_s: float = 1800.0   # a waiting call is resumed regardless after this long

    def __post_init__(self) -> None:
        checks = [("interval_s > 0", self.interval_s > 0),
                  ("buffer_per_program >= 0", self.buffer_per_program >= 0),
                  ("acting_token_weight >= 0", self.acting_token_weight >= 0),
                  ("resume_timeout_s > 0", self.resume_timeout_s > 0)]
        for what, ok in checks:
            if not ok:
                raise ValueError(f"ThunderAgentConfig: need {what}; got {self}")


@dataclass(slots=True, eq=False)
class Program:
    """The proxy's record of one session."""

    session: Session
    tokens: int = 0
    steps: int = 0                     # calls that arrived so far
    reasoning: bool = True             # a call is out (False: between calls, ACTING)
    acting_since: float = 0.0
    registered: bool = False           # counted against the capacity
    marked: bool = False               # to be paused when its current call finishes
    parked: bool = False               # its call waits outside the engine
    queued_tokens: int = 0             # tokens when it joined the queue (resume order)
    waiting_since: float = 0.0         # when its parked call began to wait


class ProgramTable:
    """The proxy's state: every program (creation order), who is registered, the global queue."""

    def __init__(self, config: ThunderAgentConfig = ThunderAgentConfig()) -> None:
        self.config = config
        self.programs: dict[str, Program] = {}
        self.queue: dict[str, Program] = {}
        self.arrivals: list[Program] = []     # new programs not yet admitted or queued
        self.released: list[Program] = []     # parked programs resumed, for `select` to admit

    def capacity(self, ctx: PolicyContext) -> int:
        return ctx.kv.total_blocks * ctx.kv.block_size

    def remaining(self, ctx: PolicyContext, decay: bool = False) -> int:
        """Capacity tokens not counted against registered programs (negative: over capacity)."""
        weight, used, count = self.config.acting_token_weight, 0.0, 0
        for p in self.programs.values():
            if not p.registered:
                continue
            count += 1
            if p.reasoning:
                used += p.tokens
            elif decay:
                used += p.tokens * 2.0 ** -(ctx.now - p.acting_since)
            else:
                used += weight * p.tokens
        return self.capacity(ctx) - (int(used) + self.config.buffer_per_program * count)

    def prune(self, ctx: PolicyContext) -> None:
        """Forget programs whose session ended (ThunderAgent's release)."""
        gone = [sid for sid, p in self.programs.items() if ctx.sessions.get(sid) is not p.session]
        for sid in gone:
            del self.programs[sid]
            self.queue.pop(sid, None)
        if gone:
            self.arrivals = [p for p in self.arrivals if self.programs.get(p.session.session_id) is p]

    def on_call(self, req: Request, ctx: PolicyContext) -> None:
        """A call arrived: re-count the program; a paused one's call waits in the queue."""
        s = ctx.sessions.get(req.session_id)
        if s is None:
            return
        p = self.programs.get(req.session_id)
        if p is None or p.session is not s:
            self.programs.pop(req.session_id, None)
            self.queue.pop(req.session_id, None)
            p = self.programs[req.session_id] = Program(s)
            self.arrivals.append(p)
        p.steps += 1
        p.tokens = req.prompt_tokens
        p.reasoning = True
        if not s.admitted or req.session_id in self.queue:
            p.parked, p.waiting_since = True, ctx.now

    def on_call_finished(self, req: Request, ctx: PolicyContext) -> None:
        """The response: ACTING with prompt + output tokens; a marked program is paused now."""
        p = self.programs.get(req.session_id)
        if p is None or ctx.sessions.get(req.session_id) is not p.session:
            return
        p.reasoning, p.acting_since = False, ctx.now
        p.tokens = req.context_tokens
        if p.marked:
            p.marked = False
            self.pause(p)

    def pause(self, p: Program) -> None:
        """Take `p` out of the count into the global queue (a new program waits there too)."""
        p.registered = False
        p.queued_tokens = p.tokens
        self.queue[p.session.session_id] = p

    def register(self, p: Program) -> None:
        """Count `p` against the capacity; its parked call, if any, is released."""
        self.queue.pop(p.session.session_id, None)
        p.registered = True
        if p.parked:
            p.parked = False
            self.released.append(p)


class ThunderAgentAdmission(Admission):
    """ThunderAgent's program queue: token-budget admission, periodic resume, then pause. In front
    of stock vLLM (request FCFS): the proxy sees each call arrive and finish."""

    def __init__(self, config: ThunderAgentConfig = ThunderAgentConfig()) -> None:
        self.table = ProgramTable(config)
        self.config = config
        self.interval_s = config.interval_s
        self.counters = {"paused": 0, "marked": 0, "resumed": 0, "forced": 0, "queued_new": 0}
        self._remaining: int | None = None

    def on_arrival(self, req: Request, ctx: PolicyContext) -> None:
        self.table.on_call(req, ctx)

    def on_finished(self, req: Request, ctx: PolicyContext) -> None:
        self.table.on_call_finished(req, ctx)

    def tick(self, ctx: PolicyContext) -> None:
        table = self.table
        table.prune(ctx)
        for p in list(table.queue.values()):
            if p.parked and ctx.now - p.waiting_since >= self.config.resume_timeout_s:
                table.register(p)
                self.counters["forced"] += 1
        self._resume(ctx)
        self._pause_until_safe(ctx)
        self._remaining = table.remaining(ctx)

    def _resume(self, ctx: PolicyContext) -> None:
        table, buf = self.table, self.config.buffer_per_program
        if not table.queue:
            return
        remaining = table.remaining(ctx, decay=self.config.acting_token_decay)
        waiting: list[Program] = []
        new: list[Program] = []
        idle: list[Program] = []
        for p in sorted(table.queue.values(), key=lambda p: p.queued_tokens):
            (new if p.steps == 1 else waiting if p.reasoning else idle).append(p)
        # First fit in priority order (ThunderAgent's `remaining > 100` gate is implied: a
        # program needs tokens + 100). It then places the chosen programs on backends largest
        # first (best-fit decreasing); with one engine every chosen program fits.
        total = 0
        for p in waiting + new + idle:
            if total + p.tokens + buf <= remaining:
                total += p.tokens + buf
                table.register(p)
                self.counters["resumed"] += 1

    def _pause_until_safe(self, ctx: PolicyContext) -> None:
        table = self.table
        while table.remaining(ctx) < 0:
            registered = [p for p in table.programs.values() if p.registered]
            acting = [p for p in registered if not p.reasoning]
            if acting:
                table.pause(min(acting, key=lambda p: p.tokens))
                self.counters["paused"] += 1
                continue
            for p in registered:
                if not p.marked:
                    p.marked = True
                    self.counters["marked"] += 1
            break

    def hold(self, session: Session, ctx: PolicyContext) -> bool:
        """A paused program's next call waits in the proxy's queue."""
        return session.session_id in self.table.queue

    def select(self, backlog: Sequence[Session], ctx: PolicyContext) -> list[Session]:
        table, buf = self.table, self.config.buffer_per_program
        if table.arrivals:
            table.prune(ctx)
            for p in table.arrivals:
                if not table.queue and table.remaining(ctx) >= p.tokens + buf:
                    table.register(p)
                else:
                    table.pause(p)
                    self.counters["queued_new"] += 1
            table.arrivals.clear()
        chosen = [p.session for p in table.released]
        table.released.clear()
        return chosen

    def stats(self) -> Stats:
        registered = [p for p in self.table.programs.values() if p.registered]
        return {"window": None, "registered": len(registered), "queued": len(self.table.queue),
                "marked": sum(p.marked for p in registered), "remaining_tokens": self._remaining,
                **self.counters}
