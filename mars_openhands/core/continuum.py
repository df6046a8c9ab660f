"""Continuum's KV retention: fixed TTL (`continuum`) and dynamic TTL (`continuum-dy`).

Shared behaviour (Continuum paper arXiv 2511.02230 and the MARS preview's re-implementation):
- a pin is released when the session's next call finishes (`release_on_resume = False`; the
  facade holds it while that call is queued or running), at TTL expiry, or on session end;
- tool time is what Continuum measures: from the turn's end until the session can resume
  (tool run time + tool queue wait);
- under memory pressure Continuum preempts running requests first (`ContinuumVictim`) and drops
  pins, the one with the latest expiry first, only when at most one request runs;
- a tool is identified by its name (how Continuum parses native tool calls: `<function=NAME>`);
  `by_command=True` uses the first word of the command instead (its bash-block parser).
Engines may learn the tool only at the tool-started event, after the turn ended; until then a
pin is decided from tool-agnostic data and repriced when the tool is known.
"""
from __future__ import annotations

import math
from abc import abstractmethod
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mars_openhands.core.context import PolicyContext
from mars_openhands.core.durations import ToolCalls
from mars_openhands.core.model import Pin, PinOffer, Request, Session
from mars_openhands.core.retention import DEFAULT_S_PER_TOKEN
from mars_openhands.core.strategies import Retention
from mars_openhands.events import Event, ToolStarted


@dataclass(frozen=True, slots=True)
class ContinuumConfig:
    ttl_s: float = 2.0                  # fixed TTL; also dynamic TTL before enough samples
    reload_s_per_token: float = DEFAULT_S_PER_TOKEN
    min_samples: int = 100              # dynamic TTL: samples before records replace the fixed TTL
    delay_window: int = 200             # dynamic TTL: re-admission delays averaged for T
    min_ttl_s: float = 0.01             # shorter pins are not made
    by_command: bool = False

    def __post_init__(self) -> None:
        if self.ttl_s <= 0 or self.min_samples < 0 or self.delay_window <= 0:
            raise ValueError("ContinuumConfig: need ttl_s > 0, min_samples >= 0, delay_window > 0; "
                             f"got {self}")


def tool_key(tool_name: str, command: str | None, by_command: bool) -> str:
    if by_command and command and command.split():
        return command.split()[0]
    return tool_name


class _ContinuumRetention(Retention):
    release_on_resume = False

    def __init__(self, config: ContinuumConfig = ContinuumConfig()) -> None:
        self.config = config
        self._tools = ToolCalls()
        self._expiry: dict[str, float] = {}   # TTL expiry each session's pin was given

    def _key(self, tool: ToolStarted | None) -> str | None:
        return None if tool is None else tool_key(tool.tool_name, tool.command, self.config.by_command)

    def _offer(self, session: Session, ttl: float, ctx: PolicyContext) -> PinOffer | None:
        if ttl <= self.config.min_ttl_s:
            return None
        self._expiry[session.session_id] = ctx.now + ttl
        return PinOffer(ttl)

    def revocation_order(self, pins: Sequence[Pin], ctx: PolicyContext) -> list[Pin]:
        if ctx.running_requests > 1:
            return []
        return sorted(pins, key=lambda p: -self._expiry.get(p.session_id, p.expires_s))

    @abstractmethod
    def _learn(self, key: str, seconds: float) -> None:
        """Record a measured tool time for `key`."""

    def observe(self, event: Event, ctx: PolicyContext) -> None:
        done = self._tools.observe(event)
        if done is not None:
            self._learn(tool_key(done.tool_name, done.command, self.config.by_command), done.seconds)

    def on_session_ended(self, session: Session, ctx: PolicyContext) -> None:
        self._expiry.pop(session.session_id, None)


class FixedTtlRetention(_ContinuumRetention):
    """`continuum`: pin for 2.0 s if the tool's running-mean duration is <= 2.0 s, else not at all.
    A tool never seen counts as mean 0 (pinned), as in Continuum's code."""

    def __init__(self, config: ContinuumConfig = ContinuumConfig()) -> None:
        super().__init__(config)
        self._means: dict[str, tuple[int, float]] = {}

    def mean_duration(self, key: str | None) -> float:
        return self._means.get(key, (0, 0.0))[1] if key is not None else 0.0

    def _learn(self, key: str, seconds: float) -> None:
        n, mean = self._means.get(key, (0, 0.0))
        self._means[key] = (n + 1, mean + (seconds - mean) / (n + 1))

    def pin_ttl(self, session: Session, context_tokens: int, blocks: int,
                ctx: PolicyContext) -> PinOffer | None:
        if self.mean_duration(self._key(session.in_tool)) > self.config.ttl_s:
            return None
        return self._offer(session, self.config.ttl_s, ctx)

    def reprice(self, pin: Pin, session: Session, ctx: PolicyContext) -> float | None:
        if self.mean_duration(self._key(session.in_tool)) > self.config.ttl_s:
            self._expiry.pop(session.session_id, None)
            return ctx.now
        return None


class _SortedSamples:
    """Observed durations kept sorted in a growable float array (O(n) memmove per insert)."""

    __slots__ = ("buf", "n")

    def __init__(self) -> None:
        self.buf = np.empty(64)
        self.n = 0

    def add(self, x: float) -> None:
        n = self.n
        if n == len(self.buf):
            self.buf = np.concatenate([self.buf, np.empty(n)])
        buf = self.buf
        i = int(buf[:n].searchsorted(x, side="right"))
        buf[i + 1:n + 1] = buf[i:n]        # numpy buffers overlapping copies
        buf[i] = x
        self.n = n + 1

    def best_tau(self, base: float) -> tuple[float, float]:
        """argmax over tau in {0} U samples of P(d <= tau) * base - tau, and its reward."""
        a = self.buf[:self.n]
        m = int(a.searchsorted(base, side="left"))       # tau >= base can never pay
        if m == 0:
            return 0.0, 0.0
        rewards = np.arange(1, m + 1) * (base / self.n) - a[:m]
        i = int(np.argmax(rewards))     # among equal samples the last has the largest P
        if rewards[i] <= 0.0:
            return 0.0, 0.0
        return float(a[i]), float(rewards[i])


class DynamicTtlRetention(_ContinuumRetention):
    """`continuum-dy`: TTL = argmax over tau in {0} U {observed durations} of
    P(d <= tau | tool) * base - tau, base = T * eta + reload(C);
    T = mean re-admission delay of the last 200 preempted requests, eta = -corr(turn index,
    turns remaining) over finished sessions (1 with fewer than 2 samples), reload(C) = 0.2 ms x C.
    Until 100 durations exist the TTL is the fixed 2.0 s; a tool uses its own records once it
    has more than 100, the global records before. No pin if the best reward is <= 0."""

    def __init__(self, config: ContinuumConfig = ContinuumConfig()) -> None:
        super().__init__(config)
        self._delays: deque[float] = deque(maxlen=config.delay_window)
        self._delay_sum = 0.0
        self._eta = [0.0] * 6     # n, sum x, sum y, sum x^2, sum y^2, sum xy
        self._global = _SortedSamples()
        self._by_tool: dict[str, _SortedSamples] = {}

    # ---- learned quantities ------------------------------------------------------------------

    def queue_delay_s(self) -> float:
        return self._delay_sum / len(self._delays) if self._delays else 0.0

    def eta(self) -> float:
        n, sx, sy, sxx, syy, sxy = self._eta
        if n < 2:
            return 1.0
        den_x, den_y = n * sxx - sx * sx, n * syy - sy * sy
        if den_x <= 0.0 or den_y <= 0.0:
            return 1.0
        corr = (n * sxy - sx * sy) / math.sqrt(den_x * den_y)
        return -max(-1.0, min(1.0, corr))

    def on_readmitted(self, req: Request, delay_s: float, ctx: PolicyContext) -> None:
        if len(self._delays) == self._delays.maxlen:
            self._delay_sum -= self._delays[0]
        self._delays.append(delay_s)
        self._delay_sum += delay_s

    def on_session_ended(self, session: Session, ctx: PolicyContext) -> None:
        """Add (k, N - k) for k = 0..N-1 (calls served before each call, calls left) in closed form."""
        super().on_session_ended(session, ctx)
        big_n = float(session.turns_finished)
        if big_n <= 0:
            return
        s_k = big_n * (big_n - 1) / 2
        s_kk = (big_n - 1) * big_n * (2 * big_n - 1) / 6
        e = self._eta
        e[0] += big_n
        e[1] += s_k
        e[2] += big_n * big_n - s_k
        e[3] += s_kk
        e[4] += big_n * big_n * big_n - 2 * big_n * s_k + s_kk
        e[5] += big_n * s_k - s_kk

    def _learn(self, key: str, seconds: float) -> None:
        self._global.add(seconds)
        samples = self._by_tool.get(key)
        if samples is None:
            samples = self._by_tool[key] = _SortedSamples()
        samples.add(seconds)

    # ---- the TTL -----------------------------------------------------------------------------

    def ttl_for(self, key: str | None, context_tokens: int) -> float:
        cfg = self.config
        base = self.queue_delay_s() * self.eta() + cfg.reload_s_per_token * context_tokens
        if base <= 0.0:
            return 0.0
        if self._global.n <= cfg.min_samples:
            return cfg.ttl_s
        own = self._by_tool.get(key) if key is not None else None
        records = own if own is not None and own.n > cfg.min_samples else self._global
        return records.best_tau(base)[0]

    def pin_ttl(self, session: Session, context_tokens: int, blocks: int,
                ctx: PolicyContext) -> PinOffer | None:
        return self._offer(session, self.ttl_for(self._key(session.in_tool), context_tokens), ctx)

    def reprice(self, pin: Pin, session: Session, ctx: PolicyContext) -> float | None:
        ttl = self.ttl_for(self._key(session.in_tool), session.context_tokens)
        if ttl <= self.config.min_ttl_s:
            self._expiry.pop(session.session_id, None)
            return ctx.now
        self._expiry[session.session_id] = pin.pinned_s + ttl
        return pin.pinned_s + ttl
