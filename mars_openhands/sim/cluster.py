"""N simulated replicas behind a router: `run_cluster(...)` (`simulate --replicas N --router-policy R`).

A thin shell around the single-engine simulator: N `Engine`s, each with its own `Policy` built from
the registry, fed by a router model (`routing.py`):

- `consistent_hash`: every call and event of a session goes to the replica its id hashes to;
- `round_robin`: each LLM call (and each event POST) goes to the next replica, so a session's calls
  hop: the prefix cache and the pins of the replica it just left do not serve it, and the replica it
  reaches sees a session it has not seen (or has stale blocks of, from an earlier visit);
- `program`: vllm-router's `--enable-program-scheduling` in front of the replicas (`ProgramGate`,
  one per replica; sessions bound by consistent hash), with any engine policy (stock: `fcfs`);
- `sticky_least_loaded`: a session's first call goes to the replica with the fewest sessions in the
  router's table, every later call and event follows it (`StickyLeastLoaded`); the agent's
  `session_ended` event, once delivered, is followed by `POST /finish_session` (as the MARS event
  emitter sends it), so the router forgets the session. With `events` other than `real` no
  `session_ended` is sent and sessions leave the table only on the router's 2-hour idle expiry.

`events` is what the replicas' policies hear of tools and sessions: `real` (the agents' events),
`inferred` (only an inferred tool start when a call ends with tool calls, on the replica that
served it, as `vllm/boundaries.py` reports it; no tool_finished, session_ended or CPU telemetry),
`none` (none of them).

**Tool workers.** Every replica host has its own pool (`tool_workers` each), and a session's tools
run on its *home* host, the replica its id hashes to, whatever replica served its last call: agents
live on a host and do not follow their LLM calls. The tool plane is therefore the same under every
router and only the routing of calls and events differs.

**One clock.** Replicas interact only when a session's calls hop (round robin): a tool finishing on
the home host starts a call on another replica. The loop always advances the replica that is
furthest behind (its clock: now if it has work, else its next happening) by one iteration of the
single-engine loop; a call handed to a replica is an arrival in that replica's own queue. Under
`consistent_hash` and `program` no replica ever hands over a call, the replicas are independent and
each runs exactly as the single-engine simulator would on its share (N=1 equals it bit for bit).
Under round robin (and `sticky_least_loaded`, whose sessions are served away from their home host)
a replica can be up to one step ahead when a call is handed to it; its decode fast-forward is cut
every `SYNC_S` to keep that small, and the arrival is then taken at the replica's own time (the
delay is reported as `late_arrival_s`). The sticky router's table is read and written when a call
or event is routed, so it sees other replicas' session ends up to that step late.
"""
from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mars_openhands.core.boundaries import INFERRED_TOOL
from mars_openhands.core.model import Pin
from mars_openhands.core.registry import EngineShape, build_policy
from mars_openhands.events import (
    CpuTelemetry,
    Event,
    SessionEnded,
    ToolCancelled,
    ToolFinished,
    ToolStarted,
)
from mars_openhands.results import RunResult, SessionResult, TurnTiming
from mars_openhands.sim.clock import ARRIVE, WAKE
from mars_openhands.sim.engine import Engine, SimulationError
from mars_openhands.sim.entities import SimSession
from mars_openhands.sim.kv import INF
from mars_openhands.sim.profiles import Profile, get_profile
from mars_openhands.sim.routing import HashRing, ProgramGate, StickyLeastLoaded, check_router
from mars_openhands.sim.runner import ideal_latency
from mars_openhands.sim.stats import Sample
from mars_openhands.sim.tools import ToolJob, ToolPlane
from mars_openhands.workload.trace import SessionTrace

#: Longest decode fast-forward of a replica while calls hop between replicas (round robin).
SYNC_S = 0.25

#: Events an agent (not the engine) sends: routed by the router, dropped or inferred by `events`.
AGENT_EVENTS = (ToolStarted, ToolFinished, ToolCancelled, SessionEnded, CpuTelemetry)


@dataclass
class ClusterStats:
    """What the routing did: calls served on a replica other than the session's previous one,
    calls and sessions per replica, handed-over arrivals taken late, prompt tokens served from the
    prefix cache and prefilled (recomputation included), the program gates' counters (summed over
    replicas), the sticky router's table counters."""

    moved_calls: int = 0
    calls: list[int] = field(default_factory=list)
    sessions: list[int] = field(default_factory=list)
    late_arrivals: int = 0
    late_arrival_s: float = 0.0
    max_late_s: float = 0.0
    prefix_hit_tokens: int = 0
    prefill_tokens: int = 0
    program: dict[str, int] = field(default_factory=dict)
    sticky: dict[str, int] = field(default_factory=dict)

    @property
    def hit_rate(self) -> float:
        """Share of prompt tokens the prefix cache served."""
        total = self.prefix_hit_tokens + self.prefill_tokens
        return self.prefix_hit_tokens / total if total else 0.0

    @property
    def imbalance(self) -> float:
        """Calls on the busiest replica over the mean (1.0: even)."""
        return max(self.calls) * len(self.calls) / sum(self.calls) if sum(self.calls) else 1.0


class _HostTools:
    """A replica's view of the tool plane: its own host's pool for its own sessions; a call it
    served for a session homed elsewhere runs its tool on that session's home host."""

    def __init__(self, engine: Replica, pool: ToolPlane) -> None:
        self.engine, self.pool = engine, pool

    @property
    def in_flight(self) -> int:
        return self.pool.in_flight

    @property
    def queued(self) -> int:
        return self.pool.queued

    @property
    def workers(self) -> int:
        return self.pool.workers

    def submit(self, job: ToolJob) -> list[ToolJob]:
        home = self.engine.cluster.home_of(job.session.sid)
        if home is self.engine:
            return self.pool.submit(job)
        home._start_tools(home.host_pool.submit(job))
        return []

    def finish(self, job: ToolJob, now: float) -> list[ToolJob]:
        return self.pool.finish(job, now)


class Replica(Engine):
    """One replica of the cluster: the single-engine simulator with its calls, tools and events
    routed by `Cluster`."""

    def __init__(self, cluster: Cluster, index: int, sessions: list[SessionTrace], profile: Profile,
                 policy_name: str, tool_workers: int, kv_blocks: int) -> None:
        policy = build_policy(policy_name, EngineShape(kv_blocks, profile.block_size, tool_workers))
        super().__init__(sessions, profile, policy, tool_workers=tool_workers, kv_blocks=kv_blocks)
        self.cluster, self.index = cluster, index
        self.host_pool = self.tools
        self.tools = _HostTools(self, self.host_pool)
        self.by_id = {s.sid: s for s in self.sessions}
        self.handed: dict[SimSession, float] = {}       # calls handed over: session -> when
        self.last_turn: dict[str, int] = {}             # the last turn of each session served here
        self.stuck = False                              # work it cannot step and nothing to wait for
        self.calls = 0
        self.gate: ProgramGate | None = None
        self._gate_wake = -1.0
        if cluster.router == "program":
            self.gate = ProgramGate(self._run_call, lambda: len(self.scheduler.waiting))

    # ---- the shared loop ------------------------------------------------------------------------

    def start(self) -> None:
        for s in self.sessions:
            if self.cluster.home_of(s.sid) is self:
                self.events.push(s.trace.arrival_s, ARRIVE, s)

    def has_work(self) -> bool:
        sched = self.scheduler
        return bool(sched.running or sched.waiting or self.backlog or sched.window)

    def clock(self) -> float:
        if self.has_work() and not self.stuck:
            return self.now
        return self.events.next_s()

    def advance(self) -> None:
        """One iteration of `Engine.run`'s loop."""
        if self.has_work() and self.step():
            return
        if self.backlog and self._ticks and not self.now < self._wake_at < INF:
            self._wake_at = max(self.policy.next_tick_s, self.now + 1e-9)
            self.events.push(self._wake_at, WAKE)
        if not self.events:
            self.stuck = True
            return
        self.stuck = False
        self.events_until(self.events.next_s())
        self.pins.expire(self.now)

    def _horizon(self) -> float:
        horizon = super()._horizon()
        if self.cluster.hops and self.now + SYNC_S < horizon:
            return self.now + SYNC_S
        return horizon

    def events_until(self, t: float) -> None:
        super().events_until(t)
        gate = self.gate
        if gate is not None:
            gate.tick(self.now)
            if gate.busy and self._gate_wake < gate.next_tick_s:
                self._gate_wake = gate.next_tick_s
                self.events.push(gate.next_tick_s, WAKE)

    # ---- calls ----------------------------------------------------------------------------------

    def _submit_turn(self, s: SimSession) -> None:
        """A session's next call (its first, or after its tool): routed, unless handed over here."""
        if self.handed.pop(s, None) is not None:
            self._arrive(s)
            return
        target = self.cluster.call_target(s.sid, self.now)
        if target is self and self.by_id[s.sid] is s:
            self._arrive(s)
        else:
            self.cluster.hand_over(s, target, self.now)

    def _arrive(self, s: SimSession) -> None:
        """The call reaches this replica's router side: through the gate, if any, to the engine."""
        if self.gate is None or self.gate.arrive(s.sid, s, self.now):
            self._run_call(s)

    def _run_call(self, s: object) -> None:
        assert isinstance(s, SimSession)
        sid, k = s.sid, s.k
        j = self.last_turn.get(sid)
        if j is not None and j < k - 1:
            self.cluster.moved += 1
            self._forget_stale(s, j, k)
        elif j is None and k > 0:
            self.cluster.moved += 1
        self.last_turn[sid] = k
        self.calls += 1
        super()._submit_turn(s)

    def _forget_stale(self, s: SimSession, j: int, k: int) -> None:
        """Blocks cached here from turn `j` serve turn `k` only as far as every prompt in between
        kept them (a condensed history changes what follows): the rest can never be hit."""
        tr = s.trace
        keep = min(tr.shared_prefix(i) for i in range(j + 1, k)) // self.bs
        for ch, start in s.segments:
            allowed = keep - start
            if allowed < ch.cap:
                ch.cap = allowed if allowed > 0 else 0

    def _finish(self, r: Any) -> None:
        super()._finish(r)
        if self.gate is not None:
            self.gate.finished(r.sess.sid, r.req.prompt_tokens, self.now)

    # ---- events ---------------------------------------------------------------------------------

    def _emit(self, ev: Event) -> list[Pin]:
        if not isinstance(ev, AGENT_EVENTS):
            return super()._emit(ev)
        mode = self.cluster.events
        if mode == "none":
            return []
        if mode == "inferred":
            if not isinstance(ev, ToolStarted):
                return []
            return super()._emit(ToolStarted(ev.session_id, ev.t, INFERRED_TOOL))
        if isinstance(ev, CpuTelemetry):
            return super()._emit(ev)          # the host's own telemetry
        target = self.cluster.event_target(ev.session_id, self.now)
        if target is self:
            pins = super()._emit(ev)
        else:
            target.pins.release_policy_pins(Engine._emit(target, ev), self.now)
            pins = []
        if isinstance(ev, SessionEnded) and self.cluster.sticky is not None:
            self.cluster.sticky.finish(ev.session_id)     # the emitter's POST /finish_session
        return pins


class Cluster:
    """N `Replica`s, the router model and the loop that advances them on one clock."""

    def __init__(self, sessions: Sequence[SessionTrace], profile: Profile, policy_name: str, *,
                 replicas: int, router: str, events: str, tool_workers: int, kv_blocks: int) -> None:
        check_router(router, events)
        self.router, self.events = router, events
        self.ring = HashRing(replicas)
        self.hops = router in ("round_robin", "sticky_least_loaded") and replicas > 1
        self.sticky = StickyLeastLoaded(replicas) if router == "sticky_least_loaded" else None
        self.moved = 0
        self._rr = 0
        ordered = sorted(sessions, key=lambda s: (s.arrival_s, s.session_id))
        self._home = {t.session_id: self.ring(t.session_id) for t in ordered}
        self.replicas = [Replica(self, i, ordered, profile, policy_name, tool_workers, kv_blocks)
                         for i in range(replicas)]
        self.traces = ordered
        self.late = [0, 0.0, 0.0]

    def home_of(self, session_id: str) -> Replica:
        return self.replicas[self._home[session_id]]

    def next_replica(self) -> Replica:
        r = self.replicas[self._rr % len(self.replicas)]
        self._rr += 1
        return r

    def call_target(self, session_id: str, now: float) -> Replica:
        """Where the session's next LLM call goes."""
        return self._route(session_id, now)

    def event_target(self, session_id: str, now: float) -> Replica:
        """Where an event POST with this session's `X-Session-ID` goes (the router does not tell
        calls from events)."""
        return self._route(session_id, now)

    def _route(self, session_id: str, now: float) -> Replica:
        if self.sticky is not None:
            return self.replicas[self.sticky.route(session_id, now)]
        return self.next_replica() if self.router == "round_robin" else self.home_of(session_id)

    def hand_over(self, s: SimSession, target: Replica, now: float) -> None:
        """The session's next call goes to `target`: an arrival in its queue at `now`."""
        s2 = target.by_id[s.sid]
        s2.k = s.k
        target.handed[s2] = now
        if target.now > now:
            late = target.now - now
            self.late[0] += 1
            self.late[1] += late
            self.late[2] = max(self.late[2], late)
        target.events.push(max(now, target.now), ARRIVE, s2)
        target.stuck = False

    def run(self, progress: Callable[[int, int], None] | None = None) -> None:
        replicas, total = self.replicas, len(self.traces)
        for r in replicas:
            r.start()
        done = 0
        while done < total:
            e = min(replicas, key=Replica.clock)
            if e.clock() == INF:
                raise SimulationError(f"cluster stalled: {done}/{total} sessions done and no replica "
                                      "has anything left to do")
            e.advance()
            now_done = sum(r.counters.done for r in replicas)
            if now_done != done:
                done = now_done
                if progress is not None:
                    progress(done, total)

    def finish_times(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {t.session_id: None for t in self.traces}
        for r in self.replicas:
            for s in r.sessions:
                if s.finish_s is not None:
                    out[s.sid] = s.finish_s
        return out

    def timings(self) -> list[TurnTiming]:
        """Every call's timing, by session and turn (a session's calls may be served on several replicas)."""
        rows = [t for r in self.replicas for s in r.sessions for t in s.timings]
        return sorted(rows, key=lambda t: (t.session_id, t.turn))

    def stats(self) -> ClusterStats:
        program: dict[str, int] = {}
        for r in self.replicas:
            if r.gate is not None:
                for k, v in r.gate.stats().items():
                    program[k] = program.get(k, 0) + v
        rs = self.replicas
        return ClusterStats(moved_calls=self.moved, calls=[r.calls for r in rs],
                            sessions=[len(r.last_turn) for r in rs],
                            late_arrivals=int(self.late[0]), late_arrival_s=self.late[1],
                            max_late_s=self.late[2],
                            prefix_hit_tokens=sum(r.counters.prefix_hit_tokens for r in rs),
                            prefill_tokens=sum(r.counters.prefill_tokens for r in rs), program=program,
                            sticky={} if self.sticky is None else self.sticky.stats())


def _merged_timeline(replicas: list[Replica]) -> list[Sample]:
    """Per second: no single window (None), mean KV usage, pinned blocks / running / queued summed."""
    n = max(len(r.timeline.samples) for r in replicas)
    out: list[Sample] = []
    for i in range(n):
        rows = [r.timeline.samples[i] for r in replicas if i < len(r.timeline.samples)]
        out.append((rows[0][0], None, sum(x[2] for x in rows) / len(rows), sum(x[3] for x in rows),
                    sum(x[4] for x in rows), sum(x[5] for x in rows)))
    return out


def run_cluster(sessions: Sequence[SessionTrace], profile: Profile | str, policy_name: str, *,
                replicas: int = 1, router: str = "consistent_hash", events: str = "real",
                tool_workers: int | None = None, kv_blocks: int | None = None,
                progress: Callable[[int, int], None] | None = None,
                stats: list[ClusterStats] | None = None) -> RunResult:
    """Simulate `replicas` engines under `policy_name` behind `router`; deterministic.

    `tool_workers` / `kv_blocks` are per replica (default: the profile's); `stats`, if given, gets
    the run's `ClusterStats` appended.
    """
    check_router(router, events)
    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {replicas}")
    if not sessions:
        raise ValueError("run_cluster: no sessions")
    prof = get_profile(profile)
    workers = prof.tool_workers if tool_workers is None else tool_workers
    blocks = prof.kv_blocks if kv_blocks is None else kv_blocks
    if workers < 1 or blocks < 1:
        raise ValueError(f"tool_workers and kv_blocks must be >= 1, got {workers} and {blocks}")
    cluster = Cluster(sessions, prof, policy_name, replicas=replicas, router=router, events=events,
                      tool_workers=workers, kv_blocks=blocks)
    gc_was_enabled = gc.isenabled()
    gc.disable()                 # as run_simulation: no garbage cycles worth collecting mid-run
    try:
        cluster.run(progress)
    finally:
        if gc_was_enabled:
            gc.enable()
    finish = cluster.finish_times()
    results = [SessionResult(t.session_id, t.arrival_s, finish[t.session_id], ideal_latency(t, prof),
                             len(t.turns)) for t in cluster.traces]
    rs = cluster.replicas
    if stats is not None:
        stats.append(cluster.stats())
    return RunResult(policy=policy_name, sessions=results,
                     recomputed_prefill_tokens=sum(r.counters.recomputed_prefill_tokens for r in rs),
                     prefix_hit_tokens=sum(r.counters.prefix_hit_tokens for r in rs),
                     pinned_block_seconds=sum(r.counters.pinned_block_seconds for r in rs),
                     preemptions=sum(r.counters.preemptions for r in rs),
                     held_idle_s=sum(r.counters.held_idle_s for r in rs),
                     timeline=_merged_timeline(rs) if replicas > 1 else rs[0].timeline.samples,
                     turns=cluster.timings())
