"""A discrete-event simulation of a vLLM-like engine serving agent sessions, plus the host tool pool.

The scheduler follows vLLM V1 (0.32, `v1/core/sched/scheduler.py`) as driven by our adapter
(`mars_openhands/vllm/scheduler.py`), step for step:

1. expired pins are released; parked sessions the policy admits enter the engine (beyond the
   policy's active window they wait in an FCFS overflow queue); running and waiting are sorted by
   `Policy.order`;
2. RUNNING requests are served in that order within `max_num_batched_tokens` (decode 1 token,
   prefill a chunk of `Policy.chunk_tokens`); when one cannot get blocks the engine retries with
   `Policy.shrink` sizes, then revokes pins in `Policy.revocation_order`, then preempts by
   recompute the victim `Policy.choose_victim` picks among the requests not yet served this step;
3. WAITING requests are admitted only if nobody was preempted, only when their whole sequence fits
   (minus prefix hits: vLLM's `scheduler_reserve_full_isl`), and a failed admission stops the queue;
4. the batch runs for the cost model's time; `Policy.on_step` gets what was scheduled.

The policy sees only what a real engine sees: core `Request`s (prompt size, what was computed) as
they arrive, boundary events and telemetry. Trace objects, output lengths still to come and tool
durations stay in engine-side objects (`entities.py`) that are never passed to it.

Decode fast-forward: a run of steps in which every running request decodes, no request finishes,
no event or admission tick falls due and the head of the waiting queue could not be admitted is the
same batch repeated (KV only gets scarcer while everyone decodes, so the head stays blocked); it is
simulated in one go (the clock, KV growth and evictions end exactly where single steps would) and
the policy gets one `on_step` with each request's tokens summed. A policy whose waiting order
changes on its own (aging) is re-asked at least every `REORDER_S` while calls wait; for a static
order (FCFS) the result equals single-stepping (tested). For the same reason a blocked waiting
queue is not re-sorted until blocks were freed, a call joined it, or `REORDER_S` passed.
"""
from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right
from collections import deque
from typing import Callable

from mars_openhands.core.model import Request
from mars_openhands.core.policy import Policy
from mars_openhands.events import (CpuTelemetry, Event, PrefillStarted, SessionEnded, ToolFinished,
                                   ToolStarted, TurnFinished, TurnSubmitted)
from mars_openhands.sim.entities import EnginePin, SimRequest, SimSession
from mars_openhands.sim.kv import INF, BlockPool, KVError
from mars_openhands.sim.prefix import SessionCache
from mars_openhands.sim.profiles import Profile
from mars_openhands.sim.tools import ToolJob, ToolPool
from mars_openhands.workload.trace import SessionTrace

_ARRIVE, _TOOL_DONE, _WAKE = 0, 1, 2

#: Longest decode fast-forward while calls wait (their head was blocked when it began): the
#: policy re-orders the waiting queue at least this often (and at every event and admission tick).
REORDER_S = 0.2
#: Idle engine, nothing in flight, parked sessions the policy keeps refusing: give up after this.
STALL_S = 3600.0


class SimulationError(RuntimeError):
    """The simulation cannot make progress (a policy that never releases what it holds)."""


class Engine:
    def __init__(self, sessions: list[SessionTrace], profile: Profile, policy: Policy, *,
                 tool_workers: int, kv_blocks: int,
                 progress: Callable[[int, int], None] | None = None,
                 on_event: Callable[[Event], None] | None = None, check: bool = False,
                 fast_forward: bool = True) -> None:
        self.p = profile
        self.bs = profile.block_size
        self.max_tokens = profile.max_num_batched_tokens
        self.max_seqs = profile.max_num_seqs
        self.pool = BlockPool(kv_blocks)
        self.tools = ToolPool(tool_workers)
        self.pol = policy
        self.admission_interval = policy.admission.interval_s if policy.admission is not None else None
        self.progress = progress
        self.listener = on_event
        self.check = check
        self.fast_forward = fast_forward
        self.stall_s = STALL_S
        self.now = 0.0
        self._heap: list = []
        self._seq = 0
        self.running: list[SimRequest] = []
        self.waiting: list[SimRequest] = []
        self.overflow: deque[SimRequest] = deque()   # admitted, beyond the policy's active window
        self.backlog: list[SimSession] = []          # sessions parked until admitted
        self._backlog_core: list | None = None       # the policy's view of `backlog` (cached)
        self.by_req: dict[Request, SimRequest] = {}
        self.cache = SessionCache(self.pool, self.bs, check)
        self.pins: dict[str, EnginePin] = {}         # engine-held pins (policy table or awaiting lookup)
        self.pinned_now = 0
        self.waiting_tokens = 0
        self.ema_tool_wait = 0.0
        self.prefill_start_latency = 0.0
        self._wake_at = INF
        self._tick_at = -math.inf                    # next admission tick (mirrors `Policy.admit`)
        #: (free blocks, waiting_version, until): the waiting head failed to fit then; with no more
        #: free blocks and the same waiting set it still fails (see REORDER_S for reordering).
        self._blocked: tuple[int, int, float] | None = None
        self.waiting_version = 0
        self._wreqs: list[Request] = []
        self._wreqs_version = -1
        self._wkeys: list | None = None              # policy keys of `waiting` while kept sorted
        self._wsorted_at = -math.inf
        self.sessions = [self._new_session(t) for t in sessions]
        # counters
        self.done = 0
        self.preemptions = 0
        self.prefix_hit_tokens = 0
        self.preempt_recompute = 0
        self.evict_recompute = 0
        self.prefill_tokens = 0          # every token computed in prefill mode (new + recomputed)
        self.decode_tokens = 0
        self.steps = 0
        self.batches = 0
        self.pinned_block_seconds = 0.0
        self.pins_made = 0
        self.pins_released = 0
        self.timeline: list[tuple[float, float | None, float, int, int, int]] = []
        self._next_sample = 0.0

    # ---- setup ----------------------------------------------------------------------------------

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

    def _push(self, t: float, kind: int, obj: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, obj))

    def _emit(self, ev: Event) -> list:
        if self.listener is not None:
            self.listener(ev)
        return self.pol.on_event(ev)

    # ---- main loop ------------------------------------------------------------------------------

    def start(self) -> None:
        """Schedule every session's arrival (`run` does it; tests drive steps by hand after it)."""
        for s in self.sessions:
            self._push(s.trace.arrival_s, _ARRIVE, s)

    def run(self) -> None:
        self.start()
        total = len(self.sessions)
        heap = self._heap
        idle_since = None
        while self.done < total:
            if (self.running or self.waiting or self.backlog or self.overflow) and self._step():
                continue
            if self.backlog and self.admission_interval is not None and not self.now < self._wake_at < INF:
                self._wake_at = max(self._tick_at, self.now + 1e-9)
                self._push(self._wake_at, _WAKE, None)
            if not heap:
                raise SimulationError(
                    f"stalled at t={self.now:.3f}: {len(self.waiting)} waiting, {len(self.backlog)} parked, "
                    f"{len(self.pins)} pins, {self.pool.free}/{self.pool.total} blocks free, no event left")
            if not self.running and not self.waiting and len(heap) == 1 and heap[0][2] == _WAKE:
                if idle_since is None:
                    idle_since = self.now
                elif self.now - idle_since > self.stall_s:
                    raise SimulationError(f"stalled at t={self.now:.3f}: the policy admitted none of "
                                          f"{len(self.backlog)} parked sessions in {self.stall_s:.0f} s "
                                          f"on an idle engine")
            else:
                idle_since = None
            self._events_until(heap[0][0])
            self._expire_pins()
        if self.check:
            self.check_invariants()

    def _advance(self, t: float) -> None:
        """Move the clock to `t`, sampling the timeline every second on the way."""
        while self._next_sample <= t:
            adm = self.pol.admission
            window = adm.stats().get("window") if adm is not None else None
            pool = self.pool
            self.timeline.append((round(self._next_sample, 3), window, 1.0 - pool.free / pool.total,
                                  self.pinned_now, len(self.running),
                                  len(self.waiting) + len(self.overflow) + len(self.backlog)))
            self._next_sample += 1.0
        if t > self.now:
            self.now = t

    def _events_until(self, t: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= t:
            et, _, kind, obj = heapq.heappop(heap)
            self._advance(et)
            if kind == _TOOL_DONE:
                self._tool_done(obj)
            elif kind == _ARRIVE:
                self._submit_turn(obj)
            elif self._wake_at <= et:
                self._wake_at = INF
        self._advance(t)

    # ---- one engine step ------------------------------------------------------------------------

    def _step(self) -> bool:
        """Schedule and run one batch; False if nothing could run (the engine waits for an event)."""
        pol, pool, now, bs = self.pol, self.pool, self.now, self.bs
        self._expire_pins()
        if self.admission_interval is not None or self.backlog:
            if now >= self._tick_at and self.admission_interval is not None:
                self._tick_at = now + self.admission_interval
            self._admit()
        if self.overflow:
            self._fill_active()
        # GPU-plane telemetry straight into the policy's view, as the vLLM adapter does every step
        kv = pol.ctx.kv
        kv.free_blocks = pool.free
        kv.pinned_blocks = pol.ctx.pins.total_blocks
        kv.waiting_demand_blocks = -(-self.waiting_tokens // bs)
        kv.prefill_start_latency_s = self.prefill_start_latency
        running = self.running
        if not running and not self.waiting:
            return False
        budget = self.max_tokens
        sched: dict[SimRequest, int] = {}
        gone: set[SimRequest] = set()
        decode_only = False
        if running:
            decode_only = len(running) <= budget
            if decode_only:
                grow = 0
                for r in running:
                    c = r.c
                    if c < r.req.prompt_tokens or c != r.req.prompt_tokens + r.req.output_tokens - 1:
                        decode_only = False
                        break
                    if r.req.kv_blocks * bs <= c:
                        grow += 1
                decode_only = decode_only and grow <= pool.free
            if decode_only:                 # the order cannot matter: everyone gets its token
                for r in running:
                    req = r.req
                    if req.kv_blocks * bs <= r.c:
                        req.kv_blocks += 1
                    sched[r] = 1
                if grow:
                    pool.take(grow)
                budget -= len(running)
            else:
                budget = self._schedule_running(budget, sched, gone)
        admitted = False
        if not gone and self.waiting and budget > 0 and len(running) < self.max_seqs:
            blocked = self._blocked
            if blocked is None or pool.free > blocked[0] or self.waiting_version != blocked[1] \
                    or now >= blocked[2] or not self.fast_forward:
                n_before = len(sched)
                budget = self._schedule_waiting(budget, sched)
                admitted = len(sched) > n_before
                self._blocked = None if admitted else (pool.free, self.waiting_version, now + REORDER_S)
        if not sched:
            return False
        if decode_only and not admitted and self.fast_forward:
            m = self._fast_forward_steps()
            if m > 1:
                self._run_decode_steps(m)
                return True
        self._run_batch(sched)
        return True

    def _tokens(self, r: SimRequest, budget: int) -> int:
        req = r.req
        if r.c < req.prompt_tokens:
            return self.pol.chunk_tokens(req, budget)
        rem = req.prompt_tokens + req.output_tokens - r.c
        if rem > 1:                       # a resumed request recomputing its own outputs
            q = self.pol.ordering.prefill_quantum(req, self.pol.ctx)
            n = rem if rem < budget else budget
            return n if q is None or q >= n else q
        return 1 if budget > 0 else 0

    def _schedule_running(self, budget: int, sched: dict, gone: set) -> int:
        pol, pool, bs, by_req = self.pol, self.pool, self.bs, self.by_req
        ordered = [by_req[q] for q in pol.order([r.req for r in self.running], self.now)]
        # Blocks are taken from the free queue's head in one go: nothing here reads the queue or
        # adds to its head in between (releases append), so the same blocks go as one by one.
        pending = 0
        for i, r in enumerate(ordered):
            if budget <= 0:
                break
            if gone and r in gone:
                continue
            req = r.req
            c, pt = r.c, req.prompt_tokens
            if c >= pt and c == pt + req.output_tokens - 1:      # decode: one token, maybe a block
                if req.kv_blocks * bs > c:
                    sched[r] = 1
                    budget -= 1
                    continue
                if pool.free > pending:
                    pending += 1
                    req.kv_blocks += 1
                    sched[r] = 1
                    budget -= 1
                    continue
                n = n0 = 1
            else:
                n = n0 = self._tokens(r, budget)
            while n > 0:
                need = -(-(r.c + n) // bs) - req.kv_blocks
                if need <= pool.free - pending:
                    if need > 0:
                        pending += need
                        req.kv_blocks += need
                    sched[r] = n
                    budget -= n
                    break
                if pending:
                    pool.take(pending)
                    pending = 0
                m = pol.shrink(n)
                if m is not None and 0 < m < n:
                    n = m
                    continue
                if self._revoke(need):
                    n = n0
                    continue
                victim = by_req[pol.choose_victim([x.req for x in ordered[i:] if x not in gone])]
                self._preempt(victim)
                gone.add(victim)
                if victim is r:
                    break
                n = n0
        if pending:
            pool.take(pending)
        return budget

    def _schedule_waiting(self, budget: int, sched: dict) -> int:
        running = self.running
        self._order_waiting()
        waiting = self.waiting
        k = 0
        for r in waiting:
            if budget <= 0 or len(running) >= self.max_seqs:
                break
            n = self._admit_request(r, budget, bool(sched))
            if not n:
                break
            sched[r] = n
            budget -= n
            running.append(r)
            k += 1
            self.waiting_tokens -= r.req.prompt_tokens + r.req.output_tokens
        if k:
            admitted = waiting[:k]
            del waiting[:k]                 # admission takes a prefix of the ordered queue
            if self._wkeys is not None:
                del self._wkeys[:k]
            self.waiting_version += 1
            for r in admitted:              # its lookup is done: the request holds the blocks now
                if r.resume_pin is not None:
                    ep, r.resume_pin = r.resume_pin, None
                    self._release_pin(ep)
        return budget

    def _order_waiting(self) -> None:
        """Sort the waiting queue by the policy's order.

        Single-stepping asks `Policy.order` every time. Otherwise the queue stays sorted between
        full re-sorts (every `REORDER_S`): a call joining it is placed by its key, so a static
        order (FCFS) is exactly the policy's and a time-varying one is at most `REORDER_S` stale.
        """
        waiting = self.waiting
        if len(waiting) < 2:
            return
        pol, now = self.pol, self.now
        if not self.fast_forward:
            by_req = self.by_req
            self.waiting = [by_req[q] for q in pol.order([r.req for r in waiting], now)]
            self.waiting_version += 1
        elif self._wkeys is None or now >= self._wsorted_at + REORDER_S:
            pol.ctx.now = now
            key, ctx = pol.ordering.key, pol.ctx
            keys = [key(r.req, ctx) for r in waiting]
            idx = sorted(range(len(waiting)), key=keys.__getitem__)
            self.waiting = [waiting[i] for i in idx]
            self._wkeys = [keys[i] for i in idx]
            self._wsorted_at = now
            self.waiting_version += 1

    def _insert_waiting(self, r: SimRequest, front: bool) -> None:
        """Add a call to the waiting queue (at its place in the kept order, if one is kept)."""
        if self._wkeys is None:
            if front:
                self.waiting.insert(0, r)
            else:
                self.waiting.append(r)
        else:
            pol = self.pol
            pol.ctx.now = self.now
            k = pol.ordering.key(r.req, pol.ctx)
            i = (bisect_left if front else bisect_right)(self._wkeys, k)
            self.waiting.insert(i, r)
            self._wkeys.insert(i, k)
        self.waiting_version += 1

    def _admit_request(self, r: SimRequest, budget: int, busy: bool) -> int:
        """Prefix lookup + allocation for a waiting request (the whole sequence must fit)."""
        pool, bs, req = self.pool, self.bs, r.req
        total_tokens = req.prompt_tokens + req.output_tokens
        while True:
            plan = self.cache.lookup(r)
            hit, touched = plan[0], plan[1]
            need = -(-total_tokens // bs) - hit + touched
            if need <= pool.free:
                break
            if self._revoke(need):
                continue
            if not busy and not self.running and self._drop_deferred_pins(r):
                continue
            req.cached_tokens = hit * bs
            return 0
        if self.cache.commit(r, plan):
            self.prefix_hit_tokens += r.first_hit
        n = self._tokens(r, budget)
        if n <= 0:
            return 0
        new = -(-(r.c + n) // bs) - req.kv_blocks
        if new > 0:
            pool.take(new)
            req.kv_blocks += new
        if not req.started:
            wait = self.now - r.enqueued_s
            self.prefill_start_latency += 0.2 * (wait - self.prefill_start_latency)
            self._emit(PrefillStarted(req.session_id, self.now, req.turn_index, req.request_id))
        return n

    def _run_batch(self, sched: dict) -> None:
        """Run one step. Computed-token counters advance when the step is scheduled (as vLLM's
        `_update_after_schedule` does, before the policy's `on_step`); sampled tokens and finished
        calls appear when it ends."""
        p, bs, pol = self.p, self.bs, self.pol
        P = D = C = 0
        A = 0.0
        sampled = []
        for r, n in sched.items():
            req = r.req
            c = r.c
            end = c + n
            pt = req.prompt_tokens
            if n == 1 and c >= pt and c >= r.done_hi:     # decode: the common case, kept short
                D += 1
                C += end
                r.c = r.done_hi = end
                if end % bs == 0:
                    self.cache.extend(r, c // bs, end // bs)
                if end == pt + req.output_tokens:
                    sampled.append(r)
                continue
            P += n
            A += n * (c + n * 0.5)
            hi = r.done_hi
            if c < hi:
                k = (end if end < hi else hi) - c
                self.preempt_recompute += k
                r.sess.recomputed += k
            lo = c if c > hi else hi
            if end > lo and lo < r.evict_hi:
                k = (end if end < r.evict_hi else r.evict_hi) - lo
                self.evict_recompute += k
                r.sess.recomputed += k
            if end > hi:
                r.done_hi = end
            r.c = end
            req.computed_tokens = end if end < pt else pt
            f_old, f_new = c // bs, end // bs
            if f_new > f_old:
                self.cache.extend(r, f_old, f_new)
            if end == pt + req.output_tokens:
                sampled.append(r)
        dt = p.step_s(P, A, D, C)
        now = self.now
        pol.on_step([(r.req, n) for r, n in sched.items()], self._waiting_reqs(), now)
        if P:
            pol.observe_prefill(P, dt)
        self.steps += 1
        self.batches += 1
        self.prefill_tokens += P
        self.decode_tokens += D
        self._events_until(now + dt)
        finished = []
        for r in sampled:
            req = r.req
            req.output_tokens += 1
            if req.output_tokens >= r.target:
                finished.append(r)
        self._finish_all(finished)

    # ---- decode fast-forward --------------------------------------------------------------------

    def _fast_forward_steps(self) -> int:
        """How many identical decode steps (the one just scheduled included) may run as one batch."""
        running, pool, bs, p = self.running, self.pool, self.bs, self.p
        m = min(r.target - r.req.output_tokens for r in running)
        if m <= 1:
            return 1
        D = len(running)
        C0 = sum(r.c for r in running) + D
        base = p.a + p.weight_read_s(D) + p.d * D
        e = p.e
        horizon = self._heap[0][0] if self._heap else INF
        if self.admission_interval is not None and self._tick_at < horizon:
            horizon = self._tick_at
        if self.waiting and self.now + REORDER_S < horizon:
            horizon = self.now + REORDER_S
        if horizon < INF:
            delta = horizon - self.now
            alpha, beta = e * D / 2.0, base + e * C0 - e * D / 2.0
            if alpha > 0:
                j = math.ceil((-beta + math.sqrt(beta * beta + 4 * alpha * delta)) / (2 * alpha))
            else:
                j = math.ceil(delta / beta)
            j = max(1, j)
            span = lambda k: k * base + e * (k * C0 + D * k * (k - 1) / 2.0)
            while j > 1 and span(j - 1) >= delta:
                j -= 1
            while span(j) < delta:
                j += 1
            m = min(m, j)
        # KV: blocks for m steps beyond the one already allocated must be free (no preemption)
        def blocks(k: int) -> int:
            return sum(max(0, -(-(r.c + k) // bs) - r.req.kv_blocks) for r in running)
        if blocks(m) > pool.free:
            lo, hi = 1, m
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if blocks(mid) <= pool.free:
                    lo = mid
                else:
                    hi = mid - 1
            m = lo
        return m

    def _run_decode_steps(self, m: int) -> None:
        running, pool, bs, p = self.running, self.pool, self.bs, self.p
        D = len(running)
        C0 = sum(r.c for r in running) + D
        base = p.a + p.weight_read_s(D) + p.d * D
        span = lambda k: k * base + p.e * (k * C0 + D * k * (k - 1) / 2.0)
        for r in running:
            need = -(-(r.c + m) // bs) - r.req.kv_blocks
            if need > 0:
                pool.take(need)
                r.req.kv_blocks += need
        now = self.now
        for r in running:                   # m steps scheduled, m - 1 of them already sampled
            c = r.c
            end = c + m
            r.c = r.done_hi = end
            f_old, f_new = c // bs, end // bs
            if f_new > f_old:
                self.cache.extend(r, f_old, f_new)
            r.req.output_tokens += m - 1
        # The policy hears of the run when its last step is scheduled (every event falls in that
        # step): the m-1 steps before it are past, so nothing about where the run ends leaks.
        last = now + span(m - 1)
        self._advance(last)
        self.pol.on_step([(r.req, m) for r in running], self._waiting_reqs(), last)
        self.steps += m
        self.batches += 1
        self.decode_tokens += D * m
        self._events_until(now + span(m))
        finished = []
        for r in running:
            r.req.output_tokens += 1
            if r.req.output_tokens >= r.target:
                finished.append(r)
        self._finish_all(finished)

    def _waiting_reqs(self) -> list[Request]:
        """The waiting calls as the policy sees them (rebuilt only when the queue changed)."""
        if self._wreqs_version != self.waiting_version:
            self._wreqs = [r.req for r in self.waiting]
            self._wreqs_version = self.waiting_version
        return self._wreqs

    def _finish_all(self, finished: list[SimRequest]) -> None:
        if finished:
            done = set(finished)
            self.running = [r for r in self.running if r not in done]
            for r in finished:
                self._finish(r)
        if self.check:
            self.check_invariants()

    # ---- KV: prefix lookup, growth, release -----------------------------------------------------

    def _preempt(self, r: SimRequest) -> None:
        req = r.req
        self.cache.release(r.holds, self.cache.private(r))
        r.holds = []
        r.c = 0
        req.computed_tokens = 0
        req.kv_blocks = 0
        self.running.remove(r)
        self._insert_waiting(r, front=True)
        self.waiting_tokens += req.prompt_tokens + req.output_tokens
        self.preemptions += 1
        self.pol.on_preempted(req, self.now)

    # ---- pins -----------------------------------------------------------------------------------

    def _release_pin(self, ep: EnginePin) -> None:
        if ep.released:
            raise KVError(f"pin of session {ep.session_id!r} released twice")
        ep.released = True
        self.cache.release(ep.holds, 0)
        ep.holds = []
        self.pinned_now -= ep.blocks
        self.pinned_block_seconds += ep.blocks * (self.now - ep.pinned_s)
        self.pins_released += 1
        if self.pins.get(ep.session_id) is ep:
            del self.pins[ep.session_id]

    def _release_policy_pins(self, pins) -> None:
        for p in pins:
            self._release_pin(p.handle)

    def _expire_pins(self) -> None:
        if self.pol.ctx.pins:
            self._release_policy_pins(self.pol.expired_pins(self.now))

    def _revoke(self, need: int) -> bool:
        """Drop pins in the policy's revocation order until `need` blocks are free; True if any went."""
        if not self.pol.ctx.pins:
            return False
        dropped = False
        for pin in self.pol.revocation_order():
            p = self.pol.release_pin(pin.session_id)
            if p is not None:
                self._release_pin(p.handle)
                dropped = True
                if self.pool.free >= need:
                    break
        return dropped

    def _drop_deferred_pins(self, r: SimRequest) -> bool:
        """With nothing running, pins kept for other waiting calls' lookups must not block `r`."""
        dropped = False
        for w in self.waiting:
            if w is not r and w.resume_pin is not None:
                ep, w.resume_pin = w.resume_pin, None
                self._release_pin(ep)
                dropped = True
        return dropped

    # ---- admission, arrivals, tools, finishing --------------------------------------------------

    def _admit(self) -> None:
        backlog = self.backlog
        if self._backlog_core is None:
            sessions = self.pol.ctx.sessions
            self._backlog_core = [sessions[s.sid] for s in backlog]
        chosen = self.pol.admit(self._backlog_core, self.now)
        if not chosen:
            return
        self._backlog_core = None
        ids = {c.session_id for c in chosen}
        keep = []
        for s in backlog:
            if s.sid in ids:
                r, s.parked = s.parked, None
                self._enter(r)
            else:
                keep.append(s)
        self.backlog = keep

    def _enter(self, r: SimRequest) -> None:
        """An admitted call joins the waiting queue, or the overflow queue beyond the active window."""
        limit = self.pol.max_active
        if limit is not None and (self.overflow or len(self.running) + len(self.waiting) >= limit):
            self.overflow.append(r)
        else:
            self._enqueue(r)

    def _fill_active(self) -> None:
        limit = self.pol.max_active
        room = len(self.overflow) if limit is None else limit - len(self.running) - len(self.waiting)
        while room > 0 and self.overflow:
            self._enqueue(self.overflow.popleft())
            room -= 1

    def _enqueue(self, r: SimRequest) -> None:
        r.enqueued_s = self.now
        self.waiting_tokens += r.req.prompt_tokens + r.req.output_tokens
        self._insert_waiting(r, front=False)

    def _submit_turn(self, s: SimSession) -> None:
        now, k, tr = self.now, s.k, s.trace
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
        self.by_req[req] = r
        req.cached_tokens = self.cache.lookup(r)[0] * self.bs
        parked = self.pol.on_request_arrival(req, now)
        pin = self.pol.resume_pin(s.sid)
        if pin is not None:
            r.resume_pin = pin.handle
        self._emit(TurnSubmitted(s.sid, now, k, turn.input_tokens, req.request_id))
        if parked:
            s.parked = r
            self.backlog.append(s)
            self._backlog_core = None
        else:
            self._enter(r)

    def _finish(self, r: SimRequest) -> None:
        pol, now, req, s = self.pol, self.now, r.req, r.sess
        del self.by_req[req]
        canon = r.c // self.bs
        decision = pol.on_request_finished(req, canon, now)
        self._release_policy_pins(decision.release)
        private = req.kv_blocks - canon
        if decision.pin is not None and s.sid not in self.pins:
            self.pool.put_hashless(private)
            ep = EnginePin(s.sid, r.holds, canon, now)
            self.pins[s.sid] = ep
            self.pinned_now += canon
            self.pins_made += 1
            ep.policy_pin = pol.record_pin(s.sid, canon, decision.pin, now, handle=ep)
            self._push_wake(ep.policy_pin.expires_s)
        else:
            self.cache.release(r.holds, private)
        r.holds = []
        req.kv_blocks = 0
        self._emit(TurnFinished(s.sid, now, req.turn_index, req.output_tokens, req.context_tokens,
                                req.request_id))
        turn = s.trace.turns[s.k]
        if turn.tool is not None:
            tool = turn.tool
            job = ToolJob(s, tool.name, tool.command, tool.duration_s, tool.cpu_cores, now,
                          call_id=req.request_id)
            self._release_policy_pins(self._emit(ToolStarted(s.sid, now, tool.name, tool.command, None,
                                                             job.call_id)))
            pin = pol.ctx.pins.get(s.sid)
            if pin is not None:
                self._push_wake(pin.expires_s)
            self._start_tools(self.tools.submit(job))
        else:
            self._release_policy_pins(self._emit(SessionEnded(s.sid, now)))
            s.finish_s = now
            self.done += 1
            if self.progress is not None:
                self.progress(self.done, len(self.sessions))

    def _start_tools(self, jobs: list[ToolJob]) -> None:
        for j in jobs:
            self.ema_tool_wait += 0.2 * ((j.started_s - j.submitted_s) - self.ema_tool_wait)
            self._push(j.started_s + j.duration_s, _TOOL_DONE, j)
        tp = self.tools
        self._emit(CpuTelemetry(self.now, tp.in_flight, tp.workers, self.ema_tool_wait))

    def _tool_done(self, job: ToolJob) -> None:
        s, now = job.session, self.now
        started = self.tools.finish(job, now)
        self._release_policy_pins(self._emit(ToolFinished(
            s.sid, now, job.name, job.duration_s, 0, job.command, job.call_id,
            queue_wait_s=job.started_s - job.submitted_s)))
        self._start_tools(started)
        s.k += 1
        self._submit_turn(s)

    def _push_wake(self, t: float) -> None:
        if self.now < t < INF:
            self._push(t, _WAKE, None)

    # ---- checks ---------------------------------------------------------------------------------

    def check_invariants(self) -> None:
        private = 0
        for r in self.running:
            p = self.cache.private(r)
            if p < 0:
                raise KVError(f"request {r.req.request_id} holds {p} private blocks")
            private += p
        for r in self.waiting:
            if r.holds or r.req.kv_blocks:
                raise KVError(f"waiting request {r.req.request_id} holds blocks")
        self.pool.check(self.cache.chains, private)
