"""Models of vllm-router's routing for the simulator's replica mode (`sim/cluster.py`).

- `HashRing`: `--policy consistent_hash` on `X-Session-ID`: a ring of 160 virtual nodes per
  replica, the session id hashed onto it (blake2b here, the router's own hash there: the same shape,
  not the same assignment), so every call and event of a session reaches one replica.
- round robin needs no model beyond a counter (`cluster.py`).
- `StickyLeastLoaded`: `--policy sticky_least_loaded` (vllm-router 0.1.17,
  `src/policies/sticky_least_loaded.rs`). The router keeps a table session id -> replica and, per
  replica, the number of *sessions* in that table (its only load signal: not in-flight requests,
  queue lengths or KV usage). A session's first request (a call or an event POST carrying
  `X-Session-ID`) goes to the healthy replica with the fewest sessions, ties broken by rendezvous
  hashing of `"<session>:<replica>"`; every later request follows the table. A session leaves the
  table on `POST /finish_session?session_id=...`, or when unused for 7,200 s
  (`VLLM_ROUTER_SLL_SESSION_EXPIRATION_IN_S`; swept at most every 60 s, at a request). A request
  whose replica is no longer healthy drops the entry and is placed afresh, and then sticks there.
  Left out: requests without a session id (balanced least-loaded, not recorded; every call here
  has one) and the router's hash (blake2b here: the same shape, not the same ties).
- `ProgramGate`: `--enable-program-scheduling` with its defaults (program identity from
  `X-Session-ID`, i.e. `program_scheduling_enable_key: auto`; no `token_capacity_per_dp_rank`),
  one gate per replica. A session (program) is bound to a replica by consistent hash. Its calls
  pass only while it is *active*; a paused program's call waits in the router's per-replica queue.
  Waiting programs are admitted in the router's resume order (a program waiting past
  `force_resume_s` first, then the one whose last call finished most recently, programs with no
  finished call last, then by queueing time) while the replica's scraped `num_requests_waiting` is
  below `waiting_threshold` and fewer than `max_active` programs are active (a forced resume ignores
  both). A finished call makes its program *acting* for a fitted TTL (a log-normal fit of the
  replica's last `window` call intervals against the router's calibrated cold-prefill cost of the
  call's prompt, at most `max_acting_ttl_s`; zero until the window is full); a program acting past
  its TTL is paused at the next decision point (a completion or the 1 s tick), giving its slot up.
  Left out, as inactive without a token capacity or irrelevant here: token-capacity admission,
  batch-gain admission, capacity repair, segment yielding, sub-agent privileges, the router's queue
  timeout (600 s, behind the forced resume at 300 s). The router sees only what it sees for real:
  arrivals, completions, prompt sizes and the scraped waiting count; no tool durations.
"""
from __future__ import annotations

import bisect
import hashlib
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

#: The `--router-policy` choices the simulator models (`simulate --replicas N`).
ROUTERS = ("consistent_hash", "round_robin", "program", "sticky_least_loaded")
#: What boundary events the replicas get: the agents' real ones, only inferred tool starts, none.
EVENT_MODES = ("real", "inferred", "none")


def check_router(router: str, events: str = "real") -> None:
    if router not in ROUTERS:
        raise ValueError(f"the simulator does not model router policy {router!r}; it models "
                         f"{', '.join(ROUTERS)}")
    if events not in EVENT_MODES:
        raise ValueError(f"unknown events mode {events!r}; known: {', '.join(EVENT_MODES)}")


def stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class HashRing:
    """Consistent hashing of session ids onto `n` replicas (`virtual_nodes` points per replica)."""

    def __init__(self, n: int, virtual_nodes: int = 160) -> None:
        if n < 1:
            raise ValueError(f"replicas must be >= 1, got {n}")
        points = sorted((stable_hash(f"replica-{i}:{v}"), i) for i in range(n) for v in range(virtual_nodes))
        self._keys = [p for p, _ in points]
        self._owners = [i for _, i in points]

    def __call__(self, session_id: str) -> int:
        k = bisect.bisect_left(self._keys, stable_hash(session_id))
        return self._owners[k % len(self._keys)]


@dataclass
class StickyLeastLoaded:
    """vllm-router's `sticky_least_loaded` table over `n` replicas (see the module docstring)."""

    n: int
    expiration_s: float = 7200.0             # DEFAULT_SESSION_EXPIRATION_SECS
    sweep_s: float = 60.0                    # SWEEP_INTERVAL_SECS
    table: dict[str, int] = field(default_factory=dict)
    last_access: dict[str, float] = field(default_factory=dict)
    counts: list[int] = field(default_factory=list)
    last_sweep: float = 0.0
    placed: int = 0
    finished: int = 0
    expired: int = 0
    rebound: int = 0

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"replicas must be >= 1, got {self.n}")
        self.counts = [0] * self.n

    def route(self, session_id: str, now: float, healthy: Sequence[int] | None = None) -> int:
        """The replica of a request of `session_id` at `now`; `healthy`: the live replicas (all)."""
        live = range(self.n) if healthy is None else healthy
        if not live:
            raise ValueError("sticky_least_loaded: no healthy replica")
        self._sweep(now)
        home = self.table.get(session_id)
        if home is not None:
            if home in live:
                self.last_access[session_id] = now
                return home
            self._drop(session_id)           # its replica is gone: placed afresh below
            self.rebound += 1
        low = min(self.counts[i] for i in live)
        pick = max((i for i in live if self.counts[i] == low),
                   key=lambda i: (stable_hash(f"{session_id}:replica-{i}"), -i))
        self.table[session_id] = pick
        self.last_access[session_id] = now
        self.counts[pick] += 1
        self.placed += 1
        return pick

    def finish(self, session_id: str) -> None:
        """`POST /finish_session?session_id=...`: the session leaves the table (unknown: no-op)."""
        if session_id in self.table:
            self._drop(session_id)
            self.finished += 1

    def _drop(self, session_id: str) -> None:
        self.counts[self.table.pop(session_id)] -= 1
        del self.last_access[session_id]

    def _sweep(self, now: float) -> None:
        if now - self.last_sweep < self.sweep_s:
            return
        for sid in [s for s, t in self.last_access.items() if now - t >= self.expiration_s]:
            self._drop(sid)
            self.expired += 1
        self.last_sweep = now

    def stats(self) -> dict[str, int]:
        return {"sll_placed": self.placed, "sll_finished": self.finished, "sll_expired": self.expired,
                "sll_rebound": self.rebound, "sll_tracked": len(self.table)}


@dataclass(frozen=True)
class ProgramConfig:
    """vllm-router 0.1.17's program-scheduling defaults (`program_scheduling_config_json` keys)."""

    max_active: int = 64                     # max_active_programs_per_target
    waiting_threshold: int = 1               # admission_waiting_request_threshold
    tick_s: float = 1.0                      # metrics_interval_seconds (scrapes and periodic decisions)
    force_resume_s: float = 300.0            # force_resume_timeout_seconds
    max_acting_ttl_s: float = 10.0           # max_acting_ttl_seconds
    window: int = 100                        # stats_window_size
    # prefill_cost_model (seconds; x = uncached prompt tokens / 1000)
    prefill_intercept_s: float = 0.06600061907132926
    prefill_linear_s: float = 0.05702024012166613
    prefill_quadratic_s: float = 0.0044057347937978475
    decode_alpha: float = 0.15


def cache_miss_impact_s(cfg: ProgramConfig, uncached_tokens: int) -> float:
    if uncached_tokens <= 0:
        return 0.0
    x = uncached_tokens / 1000.0
    prefill = cfg.prefill_intercept_s + cfg.prefill_linear_s * x + cfg.prefill_quadratic_s * x * x
    return prefill * (2.0 - cfg.decode_alpha)


def _normal_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def fitted_acting_ttl(cfg: ProgramConfig, intervals: deque[float], impact_s: float) -> float:
    """The router's TTL: the candidate maximising P(T<d)·C − E[T; T<d] − d·P(T>=d) for log-normal
    call intervals T and cache-miss cost C; 0 until the interval window is full."""
    if len(intervals) < cfg.window:
        return 0.0
    logs = [math.log(t) for t in intervals if t > 0.0 and math.isfinite(t)]
    max_ttl = min(cfg.max_acting_ttl_s, impact_s)
    if not logs or max_ttl <= 0.0:
        return 0.0
    mu = sum(logs) / len(logs)
    sigma = max(math.sqrt(sum((x - mu) ** 2 for x in logs) / len(logs)), 1e-6)
    min_ttl = min(0.05, max_ttl)
    candidates = [0.0, min_ttl, max_ttl]
    if max_ttl > min_ttl:
        lo, hi = math.log(min_ttl), math.log(max_ttl)
        candidates += [math.exp(lo + (hi - lo) * i / 31.0) for i in range(32)]
    mean = math.exp(mu + sigma * sigma / 2.0)
    best, best_u = 0.0, -math.inf
    for d in candidates:
        if d <= 0.0:
            u = 0.0
        else:
            z = (math.log(d) - mu) / sigma
            hit = _normal_cdf(z)
            u = impact_s * hit - mean * _normal_cdf(z - sigma) - d * (1.0 - hit)
        if u >= best_u:
            best, best_u = d, u
    return best if best_u >= 0.0 else 0.0


@dataclass(slots=True)
class Program:
    session_id: str
    active: bool = False
    in_flight: bool = False
    ttl_deadline: float | None = None
    last_finished: float | None = None
    queued_at: float | None = None
    force_at: float | None = None
    call: object = None                      # the held call (the engine's session object)


@dataclass
class ProgramGate:
    """The router's program scheduler for one replica; `forward(call)` hands a call to the engine,
    `waiting()` is the engine's `num_requests_waiting` (scraped every `tick_s`)."""

    forward: Callable[[object], None]
    waiting: Callable[[], int]
    cfg: ProgramConfig = field(default_factory=ProgramConfig)
    programs: dict[str, Program] = field(default_factory=dict)
    active: dict[str, Program] = field(default_factory=dict)
    queued: dict[str, Program] = field(default_factory=dict)
    intervals: deque[float] = field(default_factory=deque)
    observed_waiting: int = 0
    next_tick_s: float = 0.0
    admitted: int = 0
    forced: int = 0
    ttl_pauses: int = 0

    @property
    def busy(self) -> bool:
        """Programs queued or active: the gate needs its periodic decisions."""
        return bool(self.active or self.queued)

    def arrive(self, session_id: str, call: object, now: float) -> bool:
        """A call of `session_id` reached the router: True to forward it now, False: held."""
        p = self.programs.get(session_id)
        if p is None:
            p = self.programs[session_id] = Program(session_id)
        elif not p.in_flight and p.last_finished is not None:
            self.intervals.append(now - p.last_finished)
            if len(self.intervals) > self.cfg.window:
                self.intervals.popleft()
        if p.active:
            p.in_flight = True
            p.ttl_deadline = None
            return True
        p.call, p.queued_at, p.force_at = call, now, now + self.cfg.force_resume_s
        self.queued[session_id] = p
        self._schedule(now, forward_self=p)
        if p.active:                         # admitted at once: the caller forwards it
            p.call = None
            return True
        return False

    def finished(self, session_id: str, prompt_tokens: int, now: float) -> None:
        """A call of `session_id` completed on the replica (the router reads its usage)."""
        p = self.programs[session_id]
        p.in_flight = False
        p.last_finished = now
        impact = cache_miss_impact_s(self.cfg, prompt_tokens)   # no cached-token usage by default
        p.ttl_deadline = now + fitted_acting_ttl(self.cfg, self.intervals, impact)
        self._decide(now)

    def tick(self, now: float) -> None:
        if now >= self.next_tick_s:
            self.observed_waiting = self.waiting()
            self.next_tick_s = (math.floor(now / self.cfg.tick_s) + 1) * self.cfg.tick_s
            self._decide(now)

    def _decide(self, now: float) -> None:
        expired = [p for p in self.active.values()
                   if not p.in_flight and p.ttl_deadline is not None and p.ttl_deadline <= now]
        for p in expired:
            p.active = False
            p.ttl_deadline = None
            del self.active[p.session_id]
            self.ttl_pauses += 1
        self._schedule(now)

    def _schedule(self, now: float, forward_self: Program | None = None) -> None:
        if not self.queued:
            return
        oldest = next(iter(self.queued.values()))          # queued in time order: forced first if any
        refused = (self.observed_waiting >= self.cfg.waiting_threshold
                   or len(self.active) >= self.cfg.max_active)
        if refused and not (oldest.force_at is not None and oldest.force_at <= now):
            return
        queued = sorted(self.queued.values(),
                        key=lambda p: (not (p.force_at is not None and p.force_at <= now),
                                       p.last_finished is None, -(p.last_finished or 0.0),
                                       p.queued_at, p.session_id))
        active = len(self.active)
        for p in queued:
            forced = p.force_at is not None and p.force_at <= now
            if not forced and (self.observed_waiting >= self.cfg.waiting_threshold
                               or active >= self.cfg.max_active):
                break                        # forced programs sort first; the rest are all refused
            p.active, p.in_flight, p.queued_at, p.force_at = True, True, None, None
            self.active[p.session_id] = p
            del self.queued[p.session_id]
            active += 1
            self.admitted += 1
            self.forced += forced
            if p is not forward_self:
                call, p.call = p.call, None
                self.forward(call)

    def stats(self) -> dict[str, int]:
        return {"program_admits": self.admitted, "program_forced": self.forced,
                "program_ttl_pauses": self.ttl_pauses,
                "program_held": len(self.queued)}
