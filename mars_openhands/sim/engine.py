"""A discrete-event simulation of a vLLM-like engine serving agent sessions, plus the host tool pool.

The engine follows vLLM V1 (0.32) as driven by our adapter (`mars_openhands/vllm/scheduler.py`),
step for step. One `Engine.step`:

1. the policy hears the GPU-plane telemetry (`Policy.observe_kv`), as the adapter reports it at
   the top of its step; expired pins are released (`pins.py`); parked sessions the policy admits
   enter the engine, beyond the policy's active window into its FCFS overflow queue (`core.window`);
2. the scheduler decides the batch, running requests first, then waiting ones, with the
   allocation fallbacks (`scheduler.py`, vLLM's `Scheduler.schedule`);
3. the batch runs for the cost model's time (`batch.py`); `Policy.on_step` gets what was
   scheduled; events falling inside the step are handled; calls that sampled their last token
   finish, pin or release their KV and start their tool.

Between steps the event loop (`Engine.run`) delivers arrivals, tool completions and wake-ups
(`clock.py`) to the policy as boundary events. Counters and the timeline are in `stats.py`.

The policy sees only what a real engine sees: core `Request`s (prompt size, what was computed) as
they arrive, boundary events and telemetry. Trace objects, output lengths still to come and tool
durations stay in engine-side objects (`entities.py`) that are never passed to it.

Decode fast-forward (`batch.DecodeRun`): a run of steps in which every running request decodes is
simulated in one go and the policy gets one `on_step` with each request's tokens summed. A
policy whose waiting order changes on its own (aging) is re-asked at least every `REORDER_S`
while calls wait (`waiting.py`); for a static order (FCFS) the result equals single-stepping
(tested).

Steady-chunk fast-forward (`steady.SteadyRun`): steps in which every running call decodes or
takes the chunk its policy promises at every step (MARS' bottom MLFQ level) are run without
re-scheduling; the result equals single-stepping for every policy (tested, and the golden runs).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import cast

from mars_openhands.core.model import TOOL_WAIT_EMA, Pin, Request
from mars_openhands.core.policy import Policy
from mars_openhands.events import (
    CpuTelemetry,
    Event,
    SessionEnded,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    TurnSubmitted,
)
from mars_openhands.results import TurnTiming
from mars_openhands.sim.batch import BatchRunner, DecodeRun
from mars_openhands.sim.clock import ARRIVE, TOOL_DONE, WAKE, EventQueue
from mars_openhands.sim.closed_loop import ClosedLoop
from mars_openhands.sim.entities import EnginePin, SimRequest, SimSession
from mars_openhands.sim.kv import INF, BlockPool
from mars_openhands.sim.pins import PinKeeper
from mars_openhands.sim.prefix import SessionCache
from mars_openhands.sim.profiles import Profile
from mars_openhands.sim.scheduler import Scheduler
from mars_openhands.sim.stats import Counters, Timeline
from mars_openhands.sim.steady import SteadyRun
from mars_openhands.sim.tools import ToolJob, ToolPlane, ToolPool
from mars_openhands.sim.waiting import REORDER_S
from mars_openhands.workload.trace import SessionTrace

#: Idle engine, nothing in flight, parked sessions the policy keeps refusing: give up after this.
STALL_S = 3600.0


class SimulationError(RuntimeError):
    """The simulation cannot make progress (a policy that never releases what it holds)."""


class Engine:
    """The event loop around one simulated engine: sessions arrive, call the model, run tools."""

    def __init__(self, sessions: list[SessionTrace], profile: Profile, policy: Policy, *,
                 tool_workers: int, kv_blocks: int,
                 progress: Callable[[int, int], None] | None = None,
                 on_event: Callable[[Event], None] | None = None, check: bool = False,
                 fast_forward: bool = True, steady: bool = True, concurrency: int | None = None) -> None:
        self.p = profile
        self.bs = profile.block_size
        self.policy = policy
        self.progress = progress
        self.listener = on_event
        self.check = check
        self.fast_forward = fast_forward
        #: run steady mixed steps in one go (`steady.py`); results equal single-stepping
        self.steady = steady
        self._steady: SteadyRun | None = None
        self.stall_s = STALL_S
        self.now = 0.0
        self.events = EventQueue()
        self.counters = Counters()
        self.timeline = Timeline()
        self.pool = BlockPool(kv_blocks)
        self.tools: ToolPlane = ToolPool(tool_workers)
        self.cache = SessionCache(self.pool, self.bs, check)
        self.pins = PinKeeper(self.pool, self.cache, policy, self.counters)
        self.scheduler = Scheduler(profile, policy, self.pool, self.cache, self.pins, self.counters,
                                   self._emit, keep_sorted=fast_forward)
        self.batch = BatchRunner(profile, self.cache, self.counters)
        self.decode_run = DecodeRun(profile, self.pool, self.cache, self.counters)
        self.backlog: list[SimSession] = []          # sessions parked until admitted
        self._backlog_core: list | None = None       # the policy's view of `backlog` (cached)
        self.ema_tool_wait = 0.0
        self._ticks = policy.admission_interval_s is not None
        self._wake_at: float = INF
        self.sessions = [self._new_session(t) for t in sessions]
        #: closed-loop arrivals (`closed_loop.py`); None: each session at its trace arrival time
        self.loop = None if concurrency is None else ClosedLoop(self.sessions, concurrency)

    def _new_session(self, trace: SessionTrace) -> SimSession:
        cap = self.pool.total * self.bs
        for k, t in enumerate(trace.turns):
            if t.input_tokens + t.output_tokens > cap:
                raise ValueError(f"session {trace.session_id!r} turn {k}: {t.input_tokens + t.output_tokens} "
                                 f"tokens do not fit in the KV cache ({cap} tokens)")
        sys_blocks, chain = 0, None
        if trace.system_prompt_id is not None and trace.system_prompt_tokens:
            shortest = min(t.input_tokens for t in trace.turns)
            sys_blocks = min(trace.system_prompt_tokens, shortest) // self.bs
            if sys_blocks:
                chain = self.cache.system_chain(trace.system_prompt_id)
        return SimSession(trace, sys_blocks, chain)

    def _emit(self, ev: Event) -> list[Pin]:
        if self.listener is not None:
            self.listener(ev)
        return self.policy.on_event(ev)

    # ---- the event loop -------------------------------------------------------------------------

    def start(self) -> None:
        """Schedule every session's arrival (`run` does it; tests drive steps by hand after it); in a
        closed loop, the first users' sessions at time 0."""
        if self.loop is not None:
            for s in self.loop.start():
                self.events.push(0.0, ARRIVE, s)
            return
        for s in self.sessions:
            self.events.push(s.trace.arrival_s, ARRIVE, s)

    def run(self) -> None:
        self.start()
        total = len(self.sessions)
        events, sched = self.events, self.scheduler
        idle_since = None
        parked_idle_since: float | None = None
        while self.counters.done < total:
            if (sched.running or sched.waiting or self.backlog or sched.window) and self.step():
                parked_idle_since = None
                continue
            if self.check:
                parked_idle_since = self._check_liveness(parked_idle_since)
            if self.backlog and self._ticks and not self.now < self._wake_at < INF:
                self._wake_at = max(self.policy.next_tick_s, self.now + 1e-9)
                events.push(self._wake_at, WAKE)
            if not events:
                raise SimulationError(
                    f"stalled at t={self.now:.3f}: {len(sched.waiting)} waiting, {len(self.backlog)} parked, "
                    f"{len(self.pins.pins)} pins, {self.pool.free}/{self.pool.total} blocks free, no event left")
            if not sched.running and not sched.waiting and events.only_wakes_left():
                if idle_since is None:
                    idle_since = self.now
                elif self.now - idle_since > self.stall_s:
                    raise SimulationError(f"stalled at t={self.now:.3f}: the policy admitted none of "
                                          f"{len(self.backlog)} parked sessions in {self.stall_s:.0f} s "
                                          f"on an idle engine")
            else:
                idle_since = None
            self.events_until(events.next_s())
            self.pins.expire(self.now)
        if self.check:
            self.check_invariants()

    def _advance(self, t: float) -> None:
        """Move the clock to `t`, sampling the timeline every second on the way."""
        tl = self.timeline
        if tl.next_s <= t:
            pool, sched = self.pool, self.scheduler
            tl.fill_until(t, self.policy.admission_window, 1.0 - pool.free / pool.total,
                          self.pins.pinned_now, len(sched.running),
                          len(sched.waiting) + len(sched.window) + len(self.backlog))
        if t > self.now:
            if self.backlog and not (self.scheduler.running or self.scheduler.waiting or self.scheduler.window):
                self.counters.held_idle_s += t - self.now
            self.now = t

    def events_until(self, t: float) -> None:
        """Handle every happening due by `t`, then move the clock to `t`."""
        events = self.events
        while (due := events.pop_due(t)) is not None:
            et, kind, obj = due
            self._advance(et)
            if kind == TOOL_DONE:
                self._tool_done(cast(ToolJob, obj))
            elif kind == ARRIVE:
                self._on_arrival(cast(SimSession, obj))
            elif self._wake_at <= et:
                self._wake_at = INF
        self._advance(t)

    # ---- one engine step ------------------------------------------------------------------------

    def step(self) -> bool:
        """Schedule and run one batch; False if nothing could run (the engine waits for an event)."""
        now, sched, run = self.now, self.scheduler, self._steady
        dt = None
        if run is not None:
            dt = run.plan()
            if dt is None:
                self._end_steady(now)
                run = None
        self._observe_kv(now)
        changed = self.pins.expire(now)
        if self._ticks or self.backlog:
            changed = self._admit() or changed
        if sched.window:
            changed = sched.refill(now) or changed
        if run is not None and dt is not None:
            # (the top of the step released pins, or let calls in: the next batch is not the same)
            if not changed and not sched.admits(run.budget, now):
                self._run_steady_step(run, dt)
                return True
            self._end_steady(now)
        preemptions = self.counters.preemptions
        scheduled = sched.schedule(now)
        if scheduled is None:
            # A step that only preempted (vLLM admits nothing in such a step) changed what the next
            # one can do; otherwise the engine waits for an event.
            return self.counters.preemptions != preemptions
        if scheduled.decode_only and not scheduled.admitted and self.fast_forward:
            m = self.decode_run.steps(sched.running, now, self._horizon())
            if m > 1:
                self._run_decode_steps(m)
                return True
        self._run_batch(scheduled.tokens)
        if (self.steady and not scheduled.decode_only
                and preemptions == self.counters.preemptions and len(sched.running) == len(scheduled.tokens)):
            self._start_steady()
        return True

    def _start_steady(self) -> None:
        """After a step that served every running call and preempted none: a steady run from the
        next step on, if that step repeats this one (and will not try the waiting queue)."""
        if not self.scheduler.admits(1, self.now):
            self._steady = SteadyRun.start(self.p, self.pool, self.cache, self.counters, self.batch,
                                           self.policy, self.scheduler.running, self.now)

    def _run_steady_step(self, run: SteadyRun, dt: float) -> None:
        now = self.now
        last = run.last_step
        prefill = run.step(now)
        if last:                        # settled now: the policy hears the step before events
            self._steady = None
            self.policy.on_steps(run.finish(sampled=False), self.scheduler.waiting.requests(), now, now)
        self.policy.observe_prefill(prefill, dt)
        self.events_until(now + dt)
        if last:
            self._sample(run.decodes)
            self._start_steady()
        elif self.check:
            self.check_invariants()

    def _end_steady(self, now: float) -> None:
        """Settle the steady run; the policy hears its steps as one `on_step`."""
        run, self._steady = self._steady, None
        assert run is not None
        served = run.finish()
        if run.i:
            self.policy.on_steps(served, self.scheduler.waiting.requests(), run.last_s, now)

    def _observe_kv(self, now: float) -> None:
        """Report the GPU plane before admission, as the vLLM adapter does at the top of its step.
        Revocable blocks (O(pinned blocks)) are counted only when the control plane will read
        them, at its tick; between ticks the last count stands, as the adapter's does."""
        pol = self.policy
        revocable = None
        if self._ticks and now >= pol.next_tick_s:
            revocable = self.pins.revocable_blocks() if self.pins.pins else 0
        demand_blocks = -(-self.scheduler.waiting.demand_tokens // self.bs)
        pol.observe_kv(self.pool.free, demand_blocks, revocable)

    def _horizon(self) -> float:
        """Where a decode fast-forward must stop: the next event, admission tick or re-order."""
        horizon = self.events.next_s()
        if self._ticks and self.policy.next_tick_s < horizon:
            horizon = self.policy.next_tick_s
        if self.scheduler.waiting and self.now + REORDER_S < horizon:
            horizon = self.now + REORDER_S
        return horizon

    def _run_batch(self, tokens: dict[SimRequest, int]) -> None:
        dt, prefill, sampled, served = self.batch.run(tokens)
        pol, now = self.policy, self.now
        pol.on_step(served, self.scheduler.waiting.requests(), now)
        if prefill:
            pol.observe_prefill(prefill, dt)
        self.events_until(now + dt)
        self._sample(sampled)

    def _run_decode_steps(self, m: int) -> None:
        running, now = self.scheduler.running, self.now
        to_last, to_end = self.decode_run.run(running, m)
        # The policy hears of the run when its last step is scheduled (every event falls in that
        # step): the m-1 steps before it are past, so nothing about where the run ends leaks.
        last = now + to_last
        self._advance(last)
        self.policy.on_step([(r.req, m) for r in running], self.scheduler.waiting.requests(), last)
        self.events_until(now + to_end)
        self._sample(running)

    def _sample(self, sampled: list[SimRequest]) -> None:
        """The step ended: each of `sampled` got a token; those at their target finish."""
        finished = []
        for r in sampled:
            req = r.req
            req.output_tokens += 1
            if r.first_token_s < 0:
                r.first_token_s = self.now
            if req.output_tokens >= r.target:
                finished.append(r)
        if finished:
            self.scheduler.remove_finished(finished)
            for r in finished:
                self._finish(r)
        if self.check:
            self.check_invariants()

    # ---- sessions: arrivals, admission, finished calls, tools ---------------------------------

    def _admit(self) -> bool:
        """Parked sessions the policy admits enter the engine; True if any did."""
        backlog, pol = self.backlog, self.policy
        if self._backlog_core is None:
            self._backlog_core = [pol.session(s.sid) for s in backlog]
        chosen = pol.admit(self._backlog_core, self.now)
        if not chosen:
            return False
        ids = {c.session_id for c in chosen}
        keep = []
        self._backlog_core = [c for c in self._backlog_core if c is None or c.session_id not in ids]
        for s in backlog:
            if s.sid in ids:
                r, s.parked = s.parked, None
                assert r is not None, "a session in the backlog holds its parked call"
                self.scheduler.add(r, self.now)
            else:
                keep.append(s)
        self.backlog = keep
        return True

    def _on_arrival(self, s: SimSession) -> None:
        """An ARRIVE event: a session's first turn, or (replicas) a call routed here."""
        if s.k == 0:
            s.arrival_s = self.now
        if self.loop is not None:
            for delay, dep in self.loop.arrived(s):
                self.events.push(self.now + delay, ARRIVE, dep)
        self._submit_turn(s)

    def _submit_turn(self, s: SimSession) -> None:
        now, k, tr, pol = self.now, s.k, s.trace, self.policy
        turn = tr.turns[k]
        req = Request(f"{s.sid}#{k}", s.sid, now, turn.input_tokens, turn_index=k)
        if k == 0:
            valid, evict_hi = 0, 0
        else:
            prev = tr.turns[k - 1]
            shared = tr.shared_prefix(k)
            valid = shared // self.bs
            # what a warm cache serves: whole blocks of the shared context the last turn computed
            evict_hi = min(shared, prev.input_tokens + prev.output_tokens - 1) // self.bs * self.bs
        r = SimRequest(req, s, turn.output_tokens, valid, evict_hi)
        req.cached_tokens = self.cache.lookup(r)[0] * self.bs
        parked = pol.on_request_arrival(req, now)
        pin = pol.resume_pin(s.sid)
        if pin is not None:
            r.resume_pin = cast(EnginePin, pin.handle)
        self._emit(TurnSubmitted(s.sid, now, k, turn.input_tokens, req.request_id))
        if parked:
            s.parked = r
            self.backlog.append(s)
            if self._backlog_core is not None:
                self._backlog_core.append(pol.session(s.sid))
        else:
            self.scheduler.add(r, now)

    def _finish(self, r: SimRequest) -> None:
        pol, now, req, s = self.policy, self.now, r.req, r.sess
        canon = r.c // self.bs
        decision = pol.on_request_finished(req, canon, now)
        self.pins.release_policy_pins(decision.release, now)
        if decision.pin is not None and s.sid not in self.pins.pins:
            pin = self.pins.hold(r, canon, decision.pin, now)
            self.events.wake_at(pin.expires_s, now)
        else:
            self.cache.release(r.holds, req.kv_blocks - canon)
        r.holds = []
        req.kv_blocks = 0
        self._emit(TurnFinished(s.sid, now, req.turn_index, req.output_tokens, req.context_tokens,
                                req.request_id))
        s.timings.append(TurnTiming(s.sid, req.turn_index, req.arrival_s, r.first_token_s, now))
        turn = s.trace.turns[s.k]
        if turn.tool is not None:
            tool = turn.tool
            job = ToolJob(s, tool.name, tool.command, tool.duration_s, tool.cpu_cores, now,
                          call_id=req.request_id)
            self.pins.release_policy_pins(self._emit(ToolStarted(s.sid, now, tool.name, tool.command, None,
                                                                 job.call_id)), now)
            held = pol.pin(s.sid)
            if held is not None:
                self.events.wake_at(held.expires_s, now)
            self._start_tools(self.tools.submit(job))
        else:
            self.pins.release_policy_pins(self._emit(SessionEnded(s.sid, now)), now)
            s.finish_s = now
            self.counters.done += 1
            if self.loop is not None and (nxt := self.loop.finished(s)) is not None:
                self.events.push(now, ARRIVE, nxt)
            if self.progress is not None:
                self.progress(self.counters.done, len(self.sessions))

    def _start_tools(self, jobs: list[ToolJob]) -> None:
        for j in jobs:
            self.ema_tool_wait += TOOL_WAIT_EMA * (j.queue_wait_s - self.ema_tool_wait)
            self.events.push(j.started_s + j.duration_s, TOOL_DONE, j)
        tp = self.tools
        self._emit(CpuTelemetry(self.now, tp.in_flight, tp.workers, self.ema_tool_wait, tp.queued))

    def _tool_done(self, job: ToolJob) -> None:
        s, now = job.session, self.now
        started = self.tools.finish(job, now)
        self.pins.release_policy_pins(self._emit(ToolFinished(
            s.sid, now, job.name, job.duration_s, 0, job.command, job.call_id,
            queue_wait_s=job.queue_wait_s)), now)
        if s.timings:           # (the replica that served the call runs its tool)
            last = s.timings[-1]
            last.tool_queue_wait_s, last.tool_run_s = job.queue_wait_s, now - job.started_s
        self._start_tools(started)
        s.k += 1
        self._submit_turn(s)

    # ---- checks ---------------------------------------------------------------------------------

    def _check_liveness(self, since: float | None) -> float | None:
        """The engine is idle (nothing it could step): with sessions parked it may stay so no
        longer than the policy's liveness bound. Returns when this idle spell began, if it did."""
        sched = self.scheduler
        if sched.running or sched.waiting or sched.window or not self.backlog:
            return None
        bound = self.policy.liveness_bound_s
        if bound is None:
            return None
        if since is None:
            return self.now
        if self.now - since > bound + 1e-6:
            raise SimulationError(f"liveness: engine idle for {self.now - since:.3f} s at t={self.now:.3f} "
                                  f"with {len(self.backlog)} sessions parked (bound {bound} s)")
        return since

    def check_invariants(self) -> None:
        self.scheduler.check_invariants()
