"""The vLLM V1 scheduler behaviour that delegates every decision to the policy core.

`MarsSchedulerMixin` is what every class of `mars_openhands.vllm.scheduler` adds to vLLM's
`Scheduler` or `AsyncScheduler`. It is a thin translation layer; every rule lives in
`mars_openhands.core.Policy`:

- ordering: before each step `running` and `waiting` are sorted by `Policy.order`; vLLM then
  serves `running` in list order and admits from the head of `waiting` as usual (`waiting` is
  left unsorted in steps where no request slot is free: its order cannot matter then).
- prefill quanta: `_reserve_prefill_lookahead` (the last hook before every allocation, running and
  waiting alike) caps a prefill chunk, a resumed request's recompute of its outputs included, at
  `Policy.chunk_tokens` (not with chunked prefill off: then no prefill is split, nor shrunk).
- allocation failure: the KV manager's `allocate_slots` is wrapped (`_alloc`,
  `mars_openhands.vllm.allocation`); on failure it retries with `Policy.shrink` sizes, then
  revokes pins in `Policy.revocation_order`, then returns None so vLLM's loop preempts.
  `running.pop()` (the only call vLLM's FCFS path uses to pick a victim) is answered by
  `Policy.choose_victim` among the requests not yet scheduled this step. A shrunk chunk's token
  count is corrected in `_update_after_schedule`, before vLLM advances counters.
- pinning: `_free_blocks` (finish/abort) asks `Policy.on_request_finished`; a pin is one
  `block_pool.touch` of the call's full, hashed, non-null blocks, released by exactly one
  `block_pool.free_blocks` (`mars_openhands.vllm.pins`). The prefix cache itself serves the next
  turn.
- admission: the first call of a session the policy parks waits in `_parked`
  (`mars_openhands.vllm.parking`, outside vLLM's queues) until `Policy.admit` admits its session.
- per-call state: one `TrackedRequest` per call in `_table` (`mars_openhands.vllm.request_table`).
- active window: with `Policy.max_active` set, admitted calls beyond it wait in the FCFS overflow
  queue of `_window` (`core.window.ActiveWindow`; also outside vLLM's queues) until running +
  waiting has room. Parked and overflow calls are in vLLM's `requests` and counted as waiting by
  `get_request_counts` (outside `schedule()`), so the engine core's readings hold for them.
- speculative decoding: tokens beyond a request's own (drafts, and the 1 + k rows vLLM pads a
  fully cached new prompt to) mark a decode step, which is never capped, shrunk or counted as
  prefill.
- `--scheduling-policy priority`: request priority is the first sort key, the policy's order
  decides within one priority (for a stock-order policy: vLLM's own, by the request's
  `arrival_time`, then its id), and victims come from the lowest priority class
  (`Policy.order` / `Policy.choose_victim` with `by_priority`).
- internals: building a class checks the release and every wrapped internal (`release.internals`).
- events: `apply_events` (called between steps through the EngineCore utility added by
  `mars_openhands.vllm.plugin`) feeds `Policy.on_event`.
- history: each session's boundary happenings, for inspection (`mars_openhands.vllm.history`).
- each step's accounting (`_steps`, `mars_openhands.vllm.steps`): the measurements the policy
  prices with (free/pinned blocks every step, the waiting work's KV demand at the control-loop
  period, an EMA of the prefill-start latency, the prefill rate from each prefill-heavy step's
  model time) and the recomputed tokens of preempted calls (`recomputed_prefill_tokens`).
- cost and event lag (`_cost`, `_event_lag`: `vllm.cost`, `vllm.event_lag`): host time per step, seconds
  held with the engine idle, how late events arrive; in `mars_stats()` (`/mars/v1/stats`, `mars_*`).

Under vLLM 0.32's default `scheduler_reserve_full_isl` a waiting prompt is admitted only if it
fits whole, so chunk shrinking acts on running prefills (and on admission with
`--no-scheduler-reserve-full-isl`, as in the vLLM releases MARS was built on).

Only the engine thread touches this object, so no locking is needed.
"""
from __future__ import annotations

import os
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.request_queue import FCFSRequestQueue, SchedulingPolicy
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.engine import EngineCoreEventType
from vllm.v1.request import Request, RequestStatus

from mars_openhands.core import ActiveWindow, EngineShape, Policy, build_policy
from mars_openhands.core import Request as CoreRequest
from mars_openhands.events import TurnFinished, TurnSubmitted, parse_event
from mars_openhands.vllm.allocation import ChunkAllocation
from mars_openhands.vllm.cost import SchedulerCost
from mars_openhands.vllm.event_lag import EventLag
from mars_openhands.vllm.history import SessionHistory
from mars_openhands.vllm.parking import ParkedSessions
from mars_openhands.vllm.pins import PinKeeper
from mars_openhands.vllm.queue_views import VictimList
from mars_openhands.vllm.release.internals import check_scheduler_internals
from mars_openhands.vllm.request_table import RequestTable
from mars_openhands.vllm.session import session_of, tool_hint_of, turn_index_of
from mars_openhands.vllm.steps import StepAccounting

#: Finishes that end a turn normally (anything else - abort, error - pins nothing).
_COMPLETED = (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED,
              RequestStatus.FINISHED_REPETITION)

#: Seconds the engine loop naps when only parked requests exist (vLLM would spin at 1 ms).
PARKED_IDLE_S = 0.01


if TYPE_CHECKING:
    # What the mixin extends, for the type checker: the attributes and methods it uses are vLLM's.
    _SchedulerBase = Scheduler
else:
    _SchedulerBase = object


class MarsSchedulerMixin(_SchedulerBase):
    """Policy-driven behaviour shared by the `Scheduler` and `AsyncScheduler` variants."""

    POLICY: str = ""
    #: The policy's clock: wall time, the base of event timestamps (`Event.t`). Tests drive it.
    clock: Callable[[], float] = staticmethod(time.time)
    #: The clock a step's model time is read on (`Policy.observe_prefill`): the host's, or a
    #: virtual one where the forward pass is simulated (`mars_openhands.vsim`).
    exec_clock: Callable[[], float] = staticmethod(time.perf_counter)
    idle_nap_s: float = PARKED_IDLE_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        check_scheduler_internals()          # before vLLM builds anything we would wrap
        super().__init__(*args, **kwargs)
        check_scheduler_internals(self)
        # `--scheduling-policy priority`: the request's priority becomes the first sort key (see
        # `_order`) and bounds the victims (`_choose_victim`); vLLM's own queue and victim rule
        # stay FCFS so that the policy's order and victim hook apply within a priority class.
        self.by_priority = self.policy is SchedulingPolicy.PRIORITY
        if self.by_priority:
            self.policy = SchedulingPolicy.FCFS
            self.waiting = FCFSRequestQueue()
            self.kv_holding_waiting = FCFSRequestQueue()
        self._in_schedule = False
        pool = self.kv_cache_manager.block_pool
        workers = int(os.environ.get("MARS_TOOL_WORKERS", os.cpu_count() or 1))
        shape = EngineShape(total_blocks=pool.num_gpu_blocks - 1, block_size=self.block_size,
                            tool_workers=workers)
        self.mars: Policy = build_policy(self.POLICY, shape)   # (vLLM's `self.policy` is FCFS)
        self.mars_counters: Counter[str] = Counter()
        self.history = SessionHistory()
        self._table = RequestTable()
        self._parked = ParkedSessions(self.mars.session)
        self._window: ActiveWindow[Request] = ActiveWindow(lambda: self.mars.max_active)
        self._pins = PinKeeper(self.mars, self.kv_cache_manager, self.mars_counters,
                               clock=lambda: self.clock(), history=lambda: self.history)
        self._steps = StepAccounting(self._table, self._pins, self.mars_counters, lambda: self.exec_clock())
        self._alloc = ChunkAllocation(self.kv_cache_manager, lambda: self.mars, self._pins, self._table,
                                      self.mars_counters, self.scheduler_config, self.cache_config)
        self._cost, self._event_lag = SchedulerCost(), EventLag()
        self.running = VictimList(self.running)

    # ---- arrivals, admission, aborts ----------------------------------------------------------

    def add_request(self, request: Request) -> None:
        if request.request_id in self.requests:          # streaming-input continuation
            super().add_request(request)
            return
        now = self.clock()
        sid = session_of(request)
        creq = CoreRequest(request.request_id, sid, now,
                           request.num_prompt_tokens, turn_index=turn_index_of(request),
                           cached_tokens=self._expected_hit(request),
                           sessionless=sid == request.request_id, priority=request.priority,
                           arrival_time=request.arrival_time)
        self.history.add(creq.session_id, now, TurnSubmitted.TYPE, request.request_id,
                         creq.turn_index, creq.prompt_tokens)
        park = self.mars.on_request_arrival(creq, now)
        self._table.add(creq, self.mars.resume_pin(creq.session_id))
        self._parked.refresh(creq.session_id)      # the policy may have re-created the session
        if park:
            self._hold(request)
            self._parked.park(creq.session_id, request)
            self.mars_counters["parked"] += 1
        else:
            self._enter(request)

    def _enter(self, request: Request) -> None:
        """Hand an admitted call to vLLM's queues, or to the overflow queue if the window is full."""
        if self._window.enter(request, self._num_active()):
            self._hand_to_vllm(request)
        else:
            self._hold(request)
            self.mars_counters["overflowed"] += 1

    def _hold(self, request: Request) -> None:
        """Register a call held outside vLLM's queues (parked or overflow) as vLLM would on arrival:
        in `requests` (lookups by id, streaming continuations, `has_finished_requests`' count) and
        with its QUEUED event now, so vLLM's queue-time metrics include the time held."""
        if request.request_id in self.requests:
            return
        self.requests[request.request_id] = request
        if request.resumable and request.streaming_queue is None:
            request.streaming_queue = deque()
        if self.log_stats:
            request.record_event(EngineCoreEventType.QUEUED)

    def _hand_to_vllm(self, request: Request) -> None:
        rid = request.request_id
        self._table.records[rid].enqueued_s = self.clock()
        held = self.requests.pop(rid, None) is not None     # vLLM registers it afresh
        pending = request.streaming_queue
        super().add_request(request)
        if held:
            if pending:                                      # continuations that arrived meanwhile
                request.streaming_queue = pending
            events = request.events
            if self.log_stats and events and events[-1].type == EngineCoreEventType.QUEUED:
                events.pop()                                 # queued since it was held

    def held_counts(self) -> tuple[int, int]:
        """Calls held outside vLLM's queues: (parked, in the overflow queue)."""
        return len(self._parked), len(self._window)

    def pinned_blocks(self) -> int:
        """Blocks the live pins hold, counted per pin: those the policy's table lists and those
        handed to resuming calls whose prefix lookup is pending."""
        return self._pins.pinned

    def _num_active(self) -> int:
        return len(self.running) + len(self.waiting) + len(self.kv_holding_waiting)

    def _fill_active(self) -> None:
        if self._window:
            for request in self._window.refill(self._num_active()):
                self._hand_to_vllm(request)

    def _expected_hit(self, request: Request) -> int:
        if not self.cache_config.enable_prefix_caching or not request.block_hashes:
            return 0
        _, hit, _ = self.kv_cache_manager.coordinator.find_longest_cache_hit(
            request.block_hashes, request.num_tokens - 1)
        return hit

    def _admit_parked(self, now: float) -> None:
        backlog, forgotten = self._parked.backlog()
        sessions = self.mars.ctx.sessions
        known = len(sessions)
        admitted = [s.session_id for s in self.mars.admit(backlog, now)]
        if len(sessions) != known:       # it forgot idle sessions: look the parked ones up again
            self._parked.mark_stale()
        # A parked session the policy forgot (it ended) must not strand its calls.
        for request in self._parked.take(admitted + forgotten):
            self.mars_counters["admitted_from_park"] += 1
            self._enter(request)

    def finish_requests(self, request_ids: str | Iterable[str] | None,
                        finished_status: RequestStatus) -> list[Request]:
        if isinstance(request_ids, str):
            request_ids = (request_ids,)
        elif request_ids is not None:
            request_ids = set(request_ids)
        dropped: list[Request] = []
        if self._parked:
            dropped = self._parked.drop(lambda r: request_ids is None or r.request_id in request_ids)
            for request in dropped:
                self._drop_held(request, finished_status)
            self.mars_counters["parked_aborted"] += len(dropped)
        if self._window:
            for request in self._window.remove(lambda r: request_ids is None or r.request_id in request_ids):
                self._drop_held(request, finished_status)
                dropped.append(request)
        return dropped + super().finish_requests(request_ids, finished_status)

    def _drop_held(self, request: Request, status: RequestStatus) -> None:
        """Finish a parked or overflow call: it holds no blocks and the model never saw it. Its id
        is reported finished as vLLM reports an aborted waiting request (to the model runner and,
        with several front ends, to the one that sent it)."""
        rid = request.request_id
        request.status = status
        self.requests.pop(rid, None)
        self.finished_req_ids.add(rid)
        if self.finished_req_ids_dict is not None:
            self.finished_req_ids_dict[request.client_index].add(rid)
        self._forget(request, aborted=True)

    def get_request_counts(self) -> tuple[int, int]:
        """(running, waiting), parked and overflow calls counted as waiting: what the engine loop
        (`get_num_unfinished_requests`), `has_finished_requests`, the stats and the DP load balancer
        read, and with them in `requests` vLLM's `len(requests) == running + waiting` holds.
        Inside `schedule()` vLLM asks which requests this step can serve: held ones are not."""
        running, waiting = super().get_request_counts()
        if self._in_schedule:
            return running, waiting
        return running, waiting + len(self._parked) + len(self._window)

    # ---- one step -------------------------------------------------------------------------------

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        t0 = time.perf_counter()
        now = self.clock()
        self._cost.step_started(now)
        self._sync_kv_state(now)
        self._pins.expire(now)
        self._admit_parked(now)
        self._fill_active()
        self._order(now)
        self._alloc.new_step()
        assert isinstance(self.running, VictimList)    # installed by _order
        self.running.chooser = self._choose_victim
        self._in_schedule = True
        try:
            out = super().schedule(*args, **kwargs)
        finally:
            self._in_schedule = False
            self._alloc.current = None
            if isinstance(self.running, VictimList):
                self.running.chooser = None
        self._after_step(out, now)
        held_idle = bool(self._parked or self._window) and not self.running and not self.waiting
        self._cost.step_ended(now, t0, out.total_num_scheduled_tokens, held_idle)
        if held_idle:
            time.sleep(self.idle_nap_s)
        return out

    def _sync_kv_state(self, now: float) -> None:
        self._steps.sync_kv_state(self.mars, now, self.kv_cache_manager.block_pool, self.waiting, self.block_size)

    def _order(self, now: float) -> None:
        if self._native_order():
            # Request FCFS is vLLM's own discipline (admission order running, preempted calls
            # first when waiting): left as vLLM keeps it, so `fcfs` schedules exactly as stock.
            self.running = VictimList(self.running)
            return
        records, requests = self._table.records, self.requests
        running = [records[r.request_id].core for r in self.running]   # synced by the last step
        self.running = VictimList([requests[c.request_id] for c in self._ordered(running, now)])
        # Waiting order matters only if this step can admit someone.
        if len(self.waiting) > 1 and len(self.running) < min(self.max_num_running_reqs,
                                                              self.max_num_active_reqs):
            waiting = [records[r.request_id].core for r in self.waiting]
            ordered = [requests[c.request_id] for c in self._ordered(waiting, now)]
            assert isinstance(self.waiting, FCFSRequestQueue)    # __init__ keeps vLLM's FCFS queue
            self.waiting.clear()
            self.waiting.extend(ordered)
        if self.by_priority and len(self.kv_holding_waiting) > 1:
            assert isinstance(self.kv_holding_waiting, FCFSRequestQueue)
            holding = sorted(self.kv_holding_waiting)     # vLLM's own priority queue order
            self.kv_holding_waiting.clear()
            self.kv_holding_waiting.extend(holding)

    def _native_order(self) -> bool:
        return not self.by_priority and self.mars.stock_order

    def _ordered(self, creqs: list[CoreRequest], now: float) -> list[CoreRequest]:
        """The policy's order (with `--scheduling-policy priority`, priority first: `Policy.order`)."""
        return self.mars.order(creqs, now, by_priority=self.by_priority)

    def _sync(self, c: CoreRequest, r: Request | None = None) -> CoreRequest:
        """Copy vLLM's counters into the policy's view (policy-owned fields are left alone)."""
        r = r if r is not None else self.requests[c.request_id]
        c.computed_tokens = min(r.num_computed_tokens, r.num_prompt_tokens)
        c.output_tokens = r.num_output_tokens
        return c

    def _reserve_prefill_lookahead(self, request: Request, num_computed_tokens: int,
                                   num_new_tokens: int) -> int:
        if num_new_tokens <= 1:                  # a decode step (hot path): nothing to cap
            return (super()._reserve_prefill_lookahead(request, num_computed_tokens, num_new_tokens)
                    if self.num_prefill_lookahead else num_new_tokens)
        n = super()._reserve_prefill_lookahead(request, num_computed_tokens, num_new_tokens)
        rec = self._table.get(request.request_id)
        if rec is None or n <= 1:
            return n
        c = rec.core
        # Tokens beyond the request's own (prompt and outputs) are speculative: a decode's draft
        # tokens, or the 1 + k rows vLLM pads a new request whose prompt is fully cached to. With
        # at most one known token left this is a decode step, sized by vLLM and left alone.
        known = request.num_tokens - num_computed_tokens
        if known <= 1 or not self.scheduler_config.enable_chunked_prefill:
            return n               # a decode; or chunking is off: the adapter splits no prefill
        computed = c.computed_tokens = min(num_computed_tokens, request.num_prompt_tokens)
        if known > request.num_prompt_tokens - computed:
            # A resumed request recomputes its prompt and outputs as one prefill: the policy sees
            # it past the prompt (`remaining` then bounds the chunk, not the prompt's end).
            c.computed_tokens = request.num_prompt_tokens
        capped = self.mars.chunk_tokens(c, n, remaining=known)
        c.computed_tokens = computed
        if capped < n:
            self.mars_counters["quantum_capped_chunks"] += 1
        return max(1, capped)

    def _choose_victim(self, running: VictimList) -> Request | None:
        """Victim among the running requests not yet scheduled this step (from the current one on)."""
        current = self._alloc.current
        start = next((i for i, r in enumerate(running) if r is current), 0)
        pool = running[start:]
        if not pool:
            return None
        if self.mars.stock_victim and self._native_order():
            victim = pool[-1]               # newest in vLLM's own order: stock's `running.pop()`
            victim_c = self._sync_blocks(self._table.records[victim.request_id].core)
        else:
            records = self._table.records
            victim_c = self.mars.choose_victim([self._sync_blocks(records[r.request_id].core) for r in pool],
                                               by_priority=self.by_priority)
            victim = self.requests[victim_c.request_id]
        list.remove(running, victim)
        self.mars.on_preempted(victim_c, self.clock())
        self.mars_counters["preemptions"] += 1
        return victim

    def _preempt_request(self, request: Request, *args: Any, **kwargs: Any) -> None:
        rec = self._table.get(request.request_id)
        if rec is not None:
            rec.lost_on_preempt = request.num_computed_tokens
        super()._preempt_request(request, *args, **kwargs)
        if rec is not None:
            rec.core.computed_tokens = 0

    def _sync_blocks(self, c: CoreRequest) -> CoreRequest:
        self._sync(c)
        c.kv_blocks = self._alloc.num_blocks(c.request_id)
        return c

    def _update_after_schedule(self, scheduler_output: SchedulerOutput) -> None:
        self._alloc.correct(scheduler_output)
        super()._update_after_schedule(scheduler_output)

    def _after_step(self, out: SchedulerOutput, now: float) -> None:
        self._steps.after_step(self.mars, out, self.requests, self.waiting, now)

    def update_from_output(self, scheduler_output: SchedulerOutput, model_runner_output: Any):
        t0 = time.perf_counter()
        self._cost.model_s += self._steps.model_time(self.mars)
        try:
            return super().update_from_output(scheduler_output, model_runner_output)
        finally:
            self._cost.update_s += time.perf_counter() - t0

    # ---- finishing calls and pins ---------------------------------------------------------------

    def _free_blocks(self, request: Request) -> None:
        self._forget(request, aborted=request.status not in _COMPLETED)
        super()._free_blocks(request)

    def _forget(self, request: Request, aborted: bool) -> None:
        """Account a finished or aborted call; pin its blocks if the policy offers it."""
        rid = request.request_id
        rec = self._table.pop(rid)
        if rec is None:
            return
        self._pins.release_resume(rec, "resume")
        c, now = rec.core, self.clock()
        self._sync(c, request)
        self.history.add(c.session_id, now, TurnFinished.TYPE, rid, c.turn_index, c.output_tokens,
                         "aborted" if aborted else "finished")
        if not aborted:
            hint = tool_hint_of(request, c.session_id, now)
            if hint is not None and self.mars.hint_tool(c.session_id, hint):
                self.mars_counters["tool_hints"] += 1
        blocks = [] if aborted else self._pins.pinnable_blocks(rid)
        decision = self.mars.on_request_finished(c, len(blocks), now)
        self._parked.refresh(c.session_id)         # the call may have ended its session
        for old in decision.release:
            self._pins.release(old, "finish")
        if aborted:
            held = self.mars.release_pin(c.session_id)
            if held is not None:
                self._pins.release(held, "abort")
        elif decision.pin is not None:
            self._pins.take(c.session_id, blocks, decision.pin, now)

    def release_all_pins(self) -> int:
        pins = self.mars.release_all_pins()
        for pin in pins:
            self._pins.release(pin, "reset")
        for rec in self._table.records.values():
            self._pins.release_resume(rec, "reset")
        return len(pins)

    def reset_prefix_cache(self, *args: Any, **kwargs: Any) -> bool:
        self.release_all_pins()
        return super().reset_prefix_cache(*args, **kwargs)

    # ---- the information stream ---------------------------------------------------------------

    def apply_events(self, events: list[dict]) -> int:
        """Feed wire-form events (validated again here: the engine trusts no caller)."""
        parsed = [parse_event(e) for e in events]
        now = self.clock()
        for ev in parsed:
            self._event_lag.observe(now, getattr(ev, "t", now))     # every wire event has its t
            if self.mars.ignores(ev):       # an inferred tool start of a session with its own events
                continue
            self.history.add_event(ev, now)
            for pin in self.mars.on_event(ev):
                self._pins.release(pin, ev.TYPE)
            sid = getattr(ev, "session_id", None)
            if sid is not None:
                self._parked.refresh(sid)           # the event may have ended its session
        self.mars_counters["events"] += len(parsed)
        return len(parsed)

    def session_history(self, session_id: str) -> dict | None:
        """The session's recorded happenings in order (see `SessionHistory.get`)."""
        return self.history.get(session_id)

    def mars_stats(self) -> dict:
        pool = self.kv_cache_manager.block_pool
        running, waiting = super().get_request_counts()
        return {
            **self.mars.stats(),
            "engine": {"running": running, "waiting": waiting,
                       "parked_requests": len(self._parked), "parked_sessions": self._parked.sessions,
                       "overflow_requests": len(self._window),
                       "free_blocks": pool.get_num_free_blocks(),
                       "total_blocks": pool.num_gpu_blocks - 1,
                       "kv_usage": pool.get_usage()},
            "scheduler": self._cost.stats(),
            "event_lag": self._event_lag.stats(),
            "counters": {**self.mars_counters, **self._cost.counters()},
        }
