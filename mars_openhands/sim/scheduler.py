"""One scheduler step, as vLLM V1's `Scheduler.schedule` (0.32) runs it under our adapter.

1. RUNNING requests are served in `Policy.order` within `max_num_batched_tokens` (decode 1 token,
   prefill a chunk of `Policy.chunk_tokens`). When one cannot get blocks the step retries with
   `Policy.shrink` sizes, then revokes pins in `Policy.revocation_order`, then preempts by
   recompute the victim `Policy.choose_victim` picks among the requests not yet served this step.
2. WAITING requests are admitted only if nobody was preempted, only when their whole sequence
   fits (minus prefix hits: vLLM's `scheduler_reserve_full_isl`), and a failed admission stops
   the queue.

Computed-token counters are not advanced here (see `batch.py`): like vLLM, a step first decides
who gets how many tokens and takes their blocks.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mars_openhands.core.model import Request
from mars_openhands.core.policy import Policy
from mars_openhands.core.window import ActiveWindow
from mars_openhands.events import Event, PrefillStarted
from mars_openhands.sim.entities import SimRequest
from mars_openhands.sim.kv import BlockPool, KVError
from mars_openhands.sim.pins import PinKeeper
from mars_openhands.sim.prefix import SessionCache
from mars_openhands.sim.profiles import Profile
from mars_openhands.sim.stats import Counters
from mars_openhands.sim.waiting import WaitingQueue


@dataclass(slots=True)
class Scheduled:
    """What one step runs: tokens per request, in scheduling order."""

    tokens: dict[SimRequest, int]
    #: every running request decodes one token (with `admitted` False: a fast-forward candidate)
    decode_only: bool
    #: a waiting request was admitted this step
    admitted: bool


class Scheduler:
    """The running and waiting queues, the active window in front of them, and the step itself."""

    def __init__(self, profile: Profile, policy: Policy, pool: BlockPool, cache: SessionCache,
                 pins: PinKeeper, counters: Counters, emit: Callable[[Event], object],
                 keep_sorted: bool) -> None:
        self.policy, self.pool, self.cache, self.pins, self.counters = policy, pool, cache, pins, counters
        self.emit = emit
        self.bs = profile.block_size
        self.max_tokens = profile.max_num_batched_tokens
        self.max_seqs = profile.max_num_seqs
        self.running: list[SimRequest] = []
        self.waiting = WaitingQueue(policy, keep_sorted)
        #: admitted calls beyond the policy's active window (`Policy.max_active`)
        self.window: ActiveWindow[SimRequest] = ActiveWindow(lambda: policy.max_active)
        self.by_req: dict[Request, SimRequest] = {}

    # ---- entering and leaving ---------------------------------------------------------------

    def add(self, r: SimRequest, now: float) -> None:
        """An admitted call joins the waiting queue, or the overflow queue beyond the window."""
        self.by_req[r.req] = r
        if self.window.enter(r, len(self.running) + len(self.waiting)):
            self._enqueue(r, now)

    def refill(self, now: float) -> bool:
        """Move overflow calls into the waiting queue while the window has room; True if any moved."""
        moved = self.window.refill(len(self.running) + len(self.waiting))
        for r in moved:
            self._enqueue(r, now)
        return bool(moved)

    def _enqueue(self, r: SimRequest, now: float) -> None:
        r.enqueued_s = now
        self.waiting.insert(r, now)

    def remove_finished(self, finished: list[SimRequest]) -> None:
        done = set(finished)
        self.running = [r for r in self.running if r not in done]
        for r in finished:
            del self.by_req[r.req]

    def preempt(self, r: SimRequest, now: float) -> None:
        """Drop `r`'s KV (recompute later); it waits again at the front of its equals."""
        req = r.req
        self.cache.release(r.holds, self.cache.private(r))
        r.holds = []
        r.c = 0
        req.computed_tokens = 0
        req.kv_blocks = 0
        self.running.remove(r)
        self.waiting.insert(r, now, front=True)
        self.counters.preemptions += 1
        self.policy.on_preempted(req, now)

    # ---- the step ---------------------------------------------------------------------------

    def schedule(self, now: float) -> Scheduled | None:
        """Decide this step's batch and take its blocks; None if nothing can run."""
        pool, bs, running, waiting = self.pool, self.bs, self.running, self.waiting
        if not running and not waiting:
            return None
        budget = self.max_tokens
        sched: dict[SimRequest, int] = {}
        gone: set[SimRequest] = set()
        decode_only = False
        if running:
            decode_only = len(running) <= budget
            if decode_only:
                grow = 0
                for r in reversed(running):     # (calls still prefilling joined last: found sooner)
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
                budget = self._schedule_running(budget, sched, gone, now)
        admitted = False
        if not gone and self.admits(budget, now):
            n_before = len(sched)
            self._schedule_waiting(budget, sched, now)
            admitted = len(sched) > n_before
            waiting.note_admission(admitted, self._room(), now)
        if not sched:
            return None
        return Scheduled(sched, decode_only, admitted)

    def admits(self, budget: int, now: float) -> bool:
        """Whether a step leaving `budget` tokens would try to admit the waiting queue's head."""
        return bool(self.waiting) and budget > 0 and len(self.running) < self.max_seqs \
            and self.waiting.may_admit(self._room(), now)

    def _room(self) -> int:
        """Blocks a blocked head could get: the free ones and those pins hold (revoked for it, as the
        vLLM adapter's allocation fallback does at every step's admission attempt)."""
        return self.pool.free + self.pins.pinned_now

    def _tokens(self, r: SimRequest, budget: int) -> int:
        req = r.req
        remaining = req.prompt_tokens + req.output_tokens - r.c
        computed = req.computed_tokens
        if not req.output_tokens or computed >= req.prompt_tokens:
            return self.policy.chunk_tokens(req, budget, remaining)
        # A call resumed after preemption recomputes its prompt and its outputs as one prefill
        # (vLLM schedules `num_tokens - num_computed_tokens`): the policy sees it past its prompt,
        # as the adapter shows it, so `remaining` bounds the chunk, not the prompt's end.
        req.computed_tokens = req.prompt_tokens
        try:
            return self.policy.chunk_tokens(req, budget, remaining)
        finally:
            req.computed_tokens = computed

    def _schedule_running(self, budget: int, sched: dict, gone: set, now: float) -> int:
        pol, pool, bs, by_req = self.policy, self.pool, self.bs, self.by_req
        # `Policy.order`, on the engine's objects: a stable sort by the policy's key
        running = self.running
        keys = pol.keys([r.req for r in running], now)
        ordered = [running[i] for i in sorted(range(len(running)), key=keys.__getitem__)]
        # Blocks are taken from the free queue's head in one go: nothing here reads the queue or
        # adds to its head in between (releases append), so the same blocks go as one by one.
        pending = 0
        for r in ordered:
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
                m = pol.shrink(n, (pool.free + req.kv_blocks) * bs - r.c)
                if m is not None and 0 < m < n:
                    n = m
                    continue
                if self.pins.revoke(need, now):
                    n = n0
                    continue
                # among the requests not yet served this step (`r` and those after it)
                later = ordered[ordered.index(r):]
                victim = by_req[pol.choose_victim([x.req for x in later if x not in gone])]
                self.preempt(victim, now)
                gone.add(victim)
                if victim is r:
                    break
                n = n0
        if pending:
            pool.take(pending)
        return budget

    def _schedule_waiting(self, budget: int, sched: dict, now: float) -> None:
        running, waiting = self.running, self.waiting
        waiting.order(now)
        k = 0
        for r in waiting:
            if budget <= 0 or len(running) >= self.max_seqs:
                break
            n = self._admit_request(r, budget, bool(sched), now)
            if not n:
                break
            sched[r] = n
            budget -= n
            running.append(r)
            k += 1
        if k:
            for r in waiting.pop_head(k):   # its lookup is done: the request holds the blocks now
                if r.resume_pin is not None:
                    ep, r.resume_pin = r.resume_pin, None
                    self.pins.release(ep, now)

    def _admit_request(self, r: SimRequest, budget: int, busy: bool, now: float) -> int:
        """Prefix lookup + allocation for a waiting request (the whole sequence must fit)."""
        pool, bs, req = self.pool, self.bs, r.req
        total_tokens = req.prompt_tokens + req.output_tokens
        while True:
            plan = self.cache.lookup(r)
            hit, touched = plan[0], plan[1]
            need = -(-total_tokens // bs) - hit + touched
            if need <= pool.free:
                break
            if self.pins.revoke(need, now):
                continue
            if not busy and not self.running and self.pins.drop_deferred(self.waiting, r, now):
                continue
            req.cached_tokens = hit * bs
            return 0
        if self.cache.commit(r, plan):
            self.counters.prefix_hit_tokens += r.first_hit
        n = self._tokens(r, budget)
        if n <= 0:
            return 0
        new = -(-(r.c + n) // bs) - req.kv_blocks
        if new > 0:
            pool.take(new)
            req.kv_blocks += new
        if not req.started:
            self.policy.observe_prefill_start(now - r.enqueued_s)
            self.emit(PrefillStarted(req.session_id, now, req.turn_index, req.request_id))
        return n

    # ---- checks -----------------------------------------------------------------------------

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
