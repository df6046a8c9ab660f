"""The steady-chunk fast-forward: a run of mixed steps that repeat, taken without re-scheduling.

When every running call either decodes or takes the same prefill chunk at every step (MARS' MLFQ
at its bottom level: `Policy.steady_chunk`), nobody is admitted and the budget does not bind,
the next step is the same batch with every position one step on. `SteadyRun` runs such steps
without sorting, sizing or scanning every call: per step it takes the blocks that the calls
crossing a block boundary need, hashes the blocks they complete and runs the prefill chunks, all
in scheduling order and exactly as `BatchRunner` would; decodes' positions and sampled tokens are
settled when the run ends, and the policy hears the run as one `on_step` then (as after a decode
fast-forward).

The engine (`engine.py`) decides each step whether the run goes on: no call ending its prefill,
blocks enough, nothing admitted, refilled or unpinned at the top of the step, and a waiting head
known not to fit. Otherwise it ends the run and schedules the step as usual. A step in which a
decode samples its last token is the run's last: the run is settled before the calls finish.
Events falling inside a step are handled after it, as after any step: they read nothing the run
has not settled. Results equal single-stepping (tested).
"""
from __future__ import annotations

from mars_openhands.core.model import Request
from mars_openhands.core.policy import Policy
from mars_openhands.sim.batch import BatchRunner
from mars_openhands.sim.entities import SimRequest
from mars_openhands.sim.kv import BlockPool
from mars_openhands.sim.prefix import SessionCache
from mars_openhands.sim.profiles import Profile
from mars_openhands.sim.stats import Counters


class SteadyRun:
    __slots__ = ("p", "bs", "pool", "cache", "counters", "runner", "calls", "chunks", "c0",
                 "prefills", "decodes", "phase", "i", "left", "C0", "budget", "last_s", "_plan")

    def __init__(self, p: Profile, pool: BlockPool, cache: SessionCache, counters: Counters,
                 runner: BatchRunner, calls: list[SimRequest], chunks: list[int], left: int, budget: int) -> None:
        bs = p.block_size
        self.p, self.bs, self.pool, self.cache, self.counters, self.runner = p, bs, pool, cache, counters, runner
        #: budget left after this batch: what the waiting queue would be offered
        self.budget = budget
        self.i = 0                          # steps run so far
        # by scheduling position: the call, its tokens a step, a decode's position when the run
        # began (-1 for a prefill)
        self.calls, self.chunks = calls, chunks
        self.c0: list[int] = []
        self.prefills: list[int] = []       # positions of the prefills
        self.decodes: list[SimRequest] = []
        #: c0 % bs -> positions of the decodes at that phase: each needs a block when its position
        #: is a multiple of `bs` (its blocks hold exactly its tokens) and completes one a step earlier
        self.phase: list[list[int]] = [[] for _ in range(bs)]
        C0 = 0
        c0, prefills, decodes, phase = self.c0, self.prefills, self.decodes, self.phase
        for pos, r in enumerate(calls):
            c = r.c
            if chunks[pos] > 1 or c < r.req.prompt_tokens:
                prefills.append(pos)
                c0.append(-1)
                continue
            decodes.append(r)
            c0.append(c)
            phase[c % bs].append(pos)
            C0 += c
        #: fewest tokens a decode still has to sample
        self.left = left
        self.C0 = C0
        self.last_s = 0.0
        self._plan: tuple[int, int] | None = None    # the planned step's prefill tokens and blocks

    @classmethod
    def start(cls, p: Profile, pool: BlockPool, cache: SessionCache, counters: Counters,
              runner: BatchRunner, policy: Policy, running: list[SimRequest], now: float) -> SteadyRun | None:
        """A run from the next step on, if every running call decodes or takes its steady chunk
        within the step's token budget, and the next step is one (nobody finishes, the blocks are
        free); None otherwise. `running` was all served this step."""
        budget, bs, prefills, need, left = p.max_num_batched_tokens, p.block_size, 0, 0, 1 << 62
        chunks: list[int] = []
        for r in running:
            req, c = r.req, r.c
            pt = req.prompt_tokens
            if c >= pt and c == pt + req.output_tokens - 1:
                k = r.target - req.output_tokens
                if k < 2 or req.kv_blocks != -(-c // bs):
                    return None
                if k < left:
                    left = k
                if c % bs == 0:
                    need += 1
                chunks.append(1)
                continue
            q = policy.steady_chunk(req)
            if q is None or c + q >= pt:
                return None
            need += -(-(c + q) // bs) - req.kv_blocks
            chunks.append(q)
            prefills += 1
        budget -= sum(chunks)
        if not prefills or budget < 0 or need > pool.free:
            return None
        keys = policy.keys([r.req for r in running], now)
        idx = sorted(range(len(running)), key=keys.__getitem__)
        return cls(p, pool, cache, counters, runner, [running[i] for i in idx], [chunks[i] for i in idx],
                   left, budget)

    @property
    def last_step(self) -> bool:
        """The next step is the run's last: a decode samples its last token in it."""
        return self.left - self.i < 2

    def plan(self) -> float | None:
        """The next step's duration, if it is the same batch again (no call ends its prefill, and
        the blocks it needs are free); None when the run must end before it."""
        i, bs, calls, chunks = self.i, self.bs, self.calls, self.chunks
        need, P, A = len(self.phase[-i % bs]), 0, 0.0
        for pos in self.prefills:
            r, n = calls[pos], chunks[pos]
            c = r.c
            if c + n >= r.req.prompt_tokens:
                return None
            need += -(-(c + n) // bs) - r.req.kv_blocks
            P += n
            A += n * (c + n * 0.5)
        if need > self.pool.free:
            return None
        D = len(self.decodes)
        dt = self.p.step_s(P, A, D, self.C0 + D * (i + 1))
        self._plan = (P, need)
        return dt

    def step(self, now: float) -> int:
        """Run the planned step (started at `now`); returns its prefill tokens."""
        assert self._plan is not None, "SteadyRun.step without a plan"
        P, need = self._plan
        self._plan = None
        i, bs, cache, calls, chunks, c0 = self.i, self.bs, self.cache, self.calls, self.chunks, self.c0
        if need:
            self.pool.take(need)
        for pos in self.phase[-i % bs]:
            calls[pos].req.kv_blocks += 1
        for pos in self.prefills:
            r = calls[pos]
            blocks = -(-(r.c + chunks[pos]) // bs) - r.req.kv_blocks
            if blocks > 0:
                r.req.kv_blocks += blocks
        # blocks completed, in scheduling order (prefills complete at least one a step)
        for pos in sorted(self.phase[-(i + 1) % bs] + self.prefills):
            c = c0[pos]
            if c >= 0:
                end = c + i + 1
                cache.extend(calls[pos], end // bs - 1, end // bs)
            else:
                self.runner.prefill(calls[pos], chunks[pos])
        D = len(self.decodes)
        counters = self.counters
        counters.steps += 1
        counters.batches += 1
        counters.steady_steps += 1
        counters.prefill_tokens += P
        counters.decode_tokens += D
        self.i = i + 1
        self.last_s = now
        return P

    def finish(self, sampled: bool = True) -> list[tuple[Request, int]]:
        """Settle the decodes: positions, and the tokens they sampled (all but the last step's
        if not `sampled`: the engine samples those). Returns (request, tokens) served over the
        run, in scheduling order, for the policy's `on_step`."""
        i = self.i
        tokens = i if sampled else i - 1
        for r, c in zip(self.calls, self.c0):
            if c >= 0:
                r.c = r.done_hi = c + i
                r.req.output_tokens += tokens
        return [(r.req, n * i) for r, n in zip(self.calls, self.chunks)]
