"""vLLM's own scheduler on a virtual clock: the engine core's loop with the forward pass replaced.

`VllmEngine.run` is `EngineCore`'s busy loop, step for step: hand the scheduler what arrived
(requests through `add_request`, boundary events through the `mars_events` EngineCore utility the
`/mars/v1/events` route calls), `schedule()`, "execute" the batch, `update_from_output()`. Only
the execution is replaced: the step lasts what the profile's cost model gives for the batch the
scheduler actually scheduled (prefill tokens and their attention over the context, decode
sequences and their context), and the sampled tokens are each session's fixed draw
(`tokens.py`). Everything else - prefix caching, chunked prefill, allocation, preemption, the
policy's hooks, pins - is vLLM's and the adapter's code.

The host side is the simulator's: sessions arrive on the trace's schedule (or, with `concurrency`,
in the simulator's closed loop of that many users: `sim/closed_loop.py`), tools run on its
`ToolPool` on the virtual clock, and the host posts what the replay client posts (ToolStarted,
ToolFinished, CPU telemetry, SessionEnded). As on a live engine, what the host sends during a
step reaches the scheduler before the next one; with only held (parked or overflow) calls the
engine naps as the adapter makes it (`PARKED_IDLE_S`).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput
from vllm.v1.request import Request

from mars_openhands.core.model import TOOL_WAIT_EMA
from mars_openhands.events import CpuTelemetry, Event, SessionEnded, ToolFinished, ToolStarted
from mars_openhands.results import TurnTiming, admission_sample
from mars_openhands.sim.clock import ARRIVE, TOOL_DONE, EventQueue
from mars_openhands.sim.closed_loop import ClosedLoop
from mars_openhands.sim.engine import STALL_S, SimulationError
from mars_openhands.sim.kv import INF
from mars_openhands.sim.profiles import Profile
from mars_openhands.sim.stats import Counters, Timeline
from mars_openhands.sim.tools import ToolJob, ToolPool
from mars_openhands.vllm.adapter import PARKED_IDLE_S
from mars_openhands.vllm.plugin import mars_events
from mars_openhands.vsim.tokens import ReplyTokens, ReusingHasher, SessionTokens
from mars_openhands.workload.prompts import TokenSpace
from mars_openhands.workload.trace import SessionTrace

#: Virtual seconds a loop turn that scheduled nothing takes: the adapter's nap with only held calls
#: (the engine's busy loop otherwise, for which the same grain is taken).
SPIN_S = PARKED_IDLE_S


class EngineCoreView:
    """What the `mars_events` utility needs of the engine core: its scheduler."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler


class Session:
    __slots__ = ("trace", "sid", "k", "tokens", "arrival_s", "finish_s", "reply", "timings")

    def __init__(self, trace: SessionTrace, space: TokenSpace) -> None:
        self.trace = trace
        self.sid = trace.session_id
        self.k = 0
        self.tokens = SessionTokens(trace, space)
        self.arrival_s = trace.arrival_s        # when it arrived (closed loop: when its user was free)
        self.finish_s: float | None = None
        self.reply: list[int] = []
        self.timings: list[TurnTiming] = []    # its calls, each with the tool after it


class VllmEngine:
    """One policy's scheduler serving a trace; `run()` ends when every session has finished."""

    def __init__(self, sessions: list[SessionTrace], profile: Profile, scheduler: Any,
                 hasher: ReusingHasher, *, tool_workers: int,
                 progress: Callable[[int, int], None] | None = None, concurrency: int | None = None) -> None:
        self.p = profile
        self.sched = scheduler
        self.core = EngineCoreView(scheduler)
        self.hasher = hasher
        self.progress = progress
        self.now = 0.0
        scheduler.clock = lambda: self.now          # the policy's clock is the virtual one
        scheduler.exec_clock = lambda: self.now     # ... and so is the step's model time
        scheduler.idle_nap_s = 0.0                  # the nap is virtual too (`run`)
        self.space = TokenSpace.from_vocab(scheduler.vllm_config.model_config.get_vocab_size())
        self.replies = ReplyTokens(self.space)
        self.sessions = [Session(t, self.space) for t in sessions]
        #: closed-loop arrivals; None: each session at its trace arrival time
        self.loop = None if concurrency is None else ClosedLoop(self.sessions, concurrency)
        self.host = EventQueue()
        self.tools = ToolPool(tool_workers)
        self.ema_tool_wait = 0.0
        self.inbox: list[Request | list[Event]] = []     # sent by the host, not yet seen by the engine
        self.calls: dict[str, tuple[Session, Request]] = {}
        self.first_token: dict[str, float] = {}          # call -> when its first token was sampled
        self.system_hashes: dict[str, list] = {}
        #: call -> tokens a cache that lost nothing would serve it from its session's earlier turns
        self.warm: dict[str, int] = {}
        self.counters = Counters()
        self.timeline = Timeline()
        #: The policy's admission block at every whole second (`results.admission_sample`).
        self.admission: list[dict[str, Any]] = []

    # ---- the engine core's loop -----------------------------------------------------------------

    def run(self) -> None:
        if self.loop is not None:
            for s in self.loop.start():
                self.host.push(0.0, ARRIVE, s)
        else:
            for s in self.sessions:
                self.host.push(s.trace.arrival_s, ARRIVE, s)
        sched, total = self.sched, len(self.sessions)
        idle_since: float | None = None
        while self.counters.done < total:
            self._deliver()
            if sched.has_requests():
                out = sched.schedule()
                if out.total_num_scheduled_tokens:
                    idle_since = None
                    self._step(out)
                    continue
                sched.update_from_output(out, EMPTY_MODEL_RUNNER_OUTPUT)
            t = self.host.next_s()
            if self._busy() or self._held():
                # Nothing ran: the adapter naps while it holds calls and vLLM's queues are empty;
                # otherwise the loop spins until a pin expires or something arrives.
                t = self.now + SPIN_S if not self._busy() else min(t, self.now + SPIN_S)
                idle_since = self.now if idle_since is None else idle_since
                if self.now - idle_since > STALL_S and self.host.next_s() == INF:
                    raise SimulationError(f"stalled at t={self.now:.3f}: nothing scheduled for {STALL_S:.0f} s "
                                          f"with {self._busy()} calls in vLLM's queues and {self._held()} held")
            else:
                idle_since = None
                if t == INF:
                    raise SimulationError(f"stalled at t={self.now:.3f}: no call in the engine, nothing left to happen")
            self._host_until(t, idle=not self._busy())

    def _step(self, out: SchedulerOutput) -> None:
        dt, mro = self._execute(out)
        end = self.now + dt
        self._host_until(end, idle=False)
        outputs = self.sched.update_from_output(out, mro)
        for eco in outputs.values():
            for o in eco.outputs:
                if o.new_token_ids:
                    self.first_token.setdefault(o.request_id, self.now)
                if o.finish_reason is not None:
                    self._finished(o.request_id)

    def _execute(self, out: SchedulerOutput) -> tuple[float, ModelRunnerOutput]:
        """The batch's model time from the cost model, and the token each finished prefill samples."""
        requests, calls = self.sched.requests, self.calls
        P = D = C = 0
        A = 0.0
        ids, sampled = [], []
        for rid, n in out.num_scheduled_tokens.items():
            r = requests[rid]
            end = r.num_computed_tokens               # (vLLM advanced it when it scheduled the step)
            c = end - n
            if n == 1 and c >= r.num_prompt_tokens:
                D += 1
                C += end
            else:
                P += n
                A += n * (c + n * 0.5)
            ids.append(rid)
            if end >= r.num_tokens:
                s = calls[rid][0]
                sampled.append([s.reply[r.num_output_tokens]])
            else:
                sampled.append([])
        for new in out.scheduled_new_reqs:           # a call's first lookup: its prefix-cache hit
            if not requests[new.req_id].num_preemptions:
                hit = new.num_computed_tokens
                self.counters.prefix_hit_tokens += hit
                self.counters.evict_recompute += max(0, self.warm.pop(new.req_id, 0) - hit)
        self.counters.steps += 1
        self.counters.prefill_tokens += P
        self.counters.decode_tokens += D
        mro = ModelRunnerOutput(req_ids=ids, req_id_to_index={rid: i for i, rid in enumerate(ids)},
                                sampled_token_ids=sampled)
        return self.p.step_s(P, A, D, C), mro

    def _deliver(self) -> None:
        """What the host sent reaches the scheduler, in order (between two steps)."""
        if not self.inbox:
            return
        inbox, self.inbox = self.inbox, []
        for item in inbox:
            if isinstance(item, Request):
                self.sched.add_request(item)
            else:
                mars_events(self.core, [ev.to_dict() for ev in item])

    def _held(self) -> int:
        parked, overflow = self.sched.held_counts()
        return parked + overflow

    def _busy(self) -> int:
        return len(self.sched.running) + len(self.sched.waiting) + len(self.sched.kv_holding_waiting)

    # ---- the virtual clock ------------------------------------------------------------------------

    def _advance(self, t: float, idle: bool) -> None:
        """Move the clock to `t`: pinned blocks and held-idle seconds accrue, the timeline fills."""
        if t <= self.now:
            return
        sched = self.sched
        dt = t - self.now
        pinned = sched.pinned_blocks()
        self.counters.pinned_block_seconds += pinned * dt
        held = self._held()
        if idle and sched.held_counts()[0] and not self._busy():
            self.counters.held_idle_s += dt
        tl = self.timeline
        if tl.next_s <= t:
            pool = sched.kv_cache_manager.block_pool
            total = pool.num_gpu_blocks - 1
            filled = len(tl.samples)
            tl.fill_until(t, sched.mars.admission_window, 1.0 - pool.get_num_free_blocks() / total, pinned,
                          len(sched.running), len(sched.waiting) + len(sched.kv_holding_waiting) + held)
            stats = sched.mars.stats()      # (the state held over every second just filled)
            self.admission.extend(x for row in tl.samples[filled:]
                                  if (x := admission_sample(row[0], stats)) is not None)
        self.now = t

    def _host_until(self, t: float, idle: bool) -> None:
        """The host's happenings due by `t`, each at its time; then the clock is at `t`."""
        host = self.host
        while (due := host.pop_due(t)) is not None:
            et, kind, obj = due
            self._advance(et, idle)
            if kind == ARRIVE:
                self._arrive(cast(Session, obj))
            elif kind == TOOL_DONE:
                self._tool_done(cast(ToolJob, obj))
        self._advance(t, idle)

    # ---- the host: sessions, calls, tools ---------------------------------------------------------

    def _arrive(self, s: Session) -> None:
        """A session's first call; in a closed loop its dependents (sub-agents) are due after it."""
        s.arrival_s = self.now
        if self.loop is not None:
            for delay, dep in self.loop.arrived(s):
                self.host.push(self.now + delay, ARRIVE, dep)
        self._submit(s)

    def _submit(self, s: Session) -> None:
        """The session sends its next call (prompt as `SessionPrompts` builds it)."""
        k, tr, tokens = s.k, s.trace, s.tokens
        prompt, shape = tokens.prompts.prompt(k)
        rid = f"{s.sid}#{k}"
        if k:
            assert tokens.last_hashes is not None
            self.hasher.seed(rid, tokens.last_hashes, shape.reusable_tokens)
            prev, bs = tr.turns[k - 1], self.p.block_size
            self.warm[rid] = min(tr.shared_prefix(k), prev.input_tokens + prev.output_tokens - 1) // bs * bs
        elif tr.system_prompt_id is not None and shape.reusable_tokens:
            known = self.system_hashes.get(tr.system_prompt_id)
            if known is not None:
                self.hasher.seed(rid, known, shape.reusable_tokens)
        s.reply = self.replies.reply(s.sid, k, shape.output_tokens)
        params = SamplingParams(max_tokens=shape.output_tokens, ignore_eos=True, extra_args={"turn_index": k})
        req = Request(rid, prompt, params, None, arrival_time=self.now, block_hasher=self.hasher,
                      session_id=s.sid)
        if k == 0 and tr.system_prompt_id is not None:
            self.system_hashes.setdefault(tr.system_prompt_id, req.block_hashes)
        tokens.last_hashes = req.block_hashes
        self.calls[rid] = (s, req)
        self.inbox.append(req)

    def _finished(self, rid: str) -> None:
        s, req = self.calls.pop(rid)
        now, k = self.now, s.k
        s.timings.append(TurnTiming(s.sid, k, req.arrival_time, self.first_token.pop(rid, now), now))
        s.tokens.prompts.record(k, s.reply)
        turn = s.trace.turns[k]
        if turn.tool is None:
            self.inbox.append([SessionEnded(s.sid, now)])
            s.finish_s = now
            self.counters.done += 1
            if self.loop is not None and (nxt := self.loop.finished(s)) is not None:
                self.host.push(now, ARRIVE, nxt)
            if self.progress is not None:
                self.progress(self.counters.done, len(self.sessions))
            return
        tool = turn.tool
        job = ToolJob(s, tool.name, tool.command, tool.duration_s, tool.cpu_cores, now, call_id=rid)
        self.inbox.append([ToolStarted(s.sid, now, tool.name, tool.command, None, rid)])
        self._start_tools(self.tools.submit(job))

    def _start_tools(self, jobs: list[ToolJob]) -> None:
        for j in jobs:
            self.ema_tool_wait += TOOL_WAIT_EMA * (j.queue_wait_s - self.ema_tool_wait)
            self.host.push(j.started_s + j.duration_s, TOOL_DONE, j)
        tp = self.tools
        self.inbox.append([CpuTelemetry(self.now, tp.in_flight, tp.workers, self.ema_tool_wait, tp.queued)])

    def _tool_done(self, job: ToolJob) -> None:
        s, now = cast(Session, job.session), self.now
        started = self.tools.finish(job, now)
        last = s.timings[-1]
        last.tool_queue_wait_s, last.tool_run_s = job.queue_wait_s, now - job.started_s
        self.inbox.append([ToolFinished(s.sid, now, job.name, job.duration_s, 0, job.command, job.call_id,
                                        queue_wait_s=job.queue_wait_s)])
        self._start_tools(started)
        s.k += 1
        self._submit(s)
