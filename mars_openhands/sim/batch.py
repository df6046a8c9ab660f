"""Running what a step scheduled: KV positions advance, recomputes are counted, the step is priced.

Computed-token counters advance when the step is scheduled (as vLLM's `_update_after_schedule`
does, before the policy's `on_step`); sampled tokens appear when the step ends (the engine's
`_sample`). `DecodeRun` does the same for a run of identical decode steps at once.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from mars_openhands.core.model import Request
from mars_openhands.sim.entities import SimRequest
from mars_openhands.sim.kv import INF, BlockPool
from mars_openhands.sim.prefix import SessionCache
from mars_openhands.sim.profiles import Profile
from mars_openhands.sim.stats import Counters


class BatchRunner:
    __slots__ = ("p", "bs", "cache", "counters")

    def __init__(self, profile: Profile, cache: SessionCache, counters: Counters) -> None:
        self.p, self.bs, self.cache, self.counters = profile, profile.block_size, cache, counters

    def run(self, sched: dict[SimRequest, int]) -> tuple[float, int, list[SimRequest], list[tuple[Request, int]]]:
        """Advance every scheduled call; (step seconds, prefill tokens, calls that sample a token,
        what the policy hears of the step: (request, tokens) in scheduling order)."""
        bs, cache, counters = self.bs, self.cache, self.counters
        P = D = C = 0
        A = 0.0
        sampled = []
        served = []
        for r, n in sched.items():
            req = r.req
            served.append((req, n))
            c = r.c
            end = c + n
            pt = req.prompt_tokens
            if n == 1 and c >= pt and c >= r.done_hi:     # decode: the common case, kept short
                D += 1
                C += end
                r.c = r.done_hi = end
                if end % bs == 0:
                    cache.extend(r, c // bs, end // bs)
                if end == pt + req.output_tokens:
                    sampled.append(r)
                continue
            P += n
            A += n * (c + n * 0.5)
            self.prefill(r, n)
            if end == pt + req.output_tokens:
                sampled.append(r)
        counters.steps += 1
        counters.batches += 1
        counters.prefill_tokens += P
        counters.decode_tokens += D
        return self.p.step_s(P, A, D, C), P, sampled, served


    def prefill(self, r: SimRequest, n: int) -> None:
        """Advance a prefill (or recompute) chunk of `n` tokens: recomputed tokens are counted,
        the blocks it completes join the call's chains."""
        counters, req, bs = self.counters, r.req, self.bs
        c = r.c
        end = c + n
        hi = r.done_hi
        if c < hi:
            k = (end if end < hi else hi) - c
            counters.preempt_recompute += k
            r.sess.recomputed += k
        lo = c if c > hi else hi
        if end > lo and lo < r.evict_hi:
            k = (end if end < r.evict_hi else r.evict_hi) - lo
            counters.evict_recompute += k
            r.sess.recomputed += k
        if end > hi:
            r.done_hi = end
        r.c = end
        pt = req.prompt_tokens
        req.computed_tokens = end if end < pt else pt
        f_old, f_new = c // bs, end // bs
        if f_new > f_old:
            self.cache.extend(r, f_old, f_new)


class DecodeRun:
    """The decode fast-forward: a run of steps in which every running request decodes.

    Such a run, with no request finishing, no event or admission tick falling due and the head of
    the waiting queue blocked, is the same batch repeated (KV only gets scarcer while everyone
    decodes, so the head stays blocked); it is simulated in one go, and the clock, KV growth and
    evictions end exactly where single steps would.
    """

    __slots__ = ("p", "bs", "pool", "cache", "counters")

    def __init__(self, profile: Profile, pool: BlockPool, cache: SessionCache, counters: Counters) -> None:
        self.p, self.bs, self.pool, self.cache, self.counters = (profile, profile.block_size, pool, cache,
                                                                 counters)

    def steps(self, running: Sequence[SimRequest], now: float, horizon: float) -> int:
        """How many identical decode steps (the one just scheduled included) may run as one batch
        before `horizon` (the next event, tick or re-order), with no preemption."""
        pool, bs, p = self.pool, self.bs, self.p
        m = min(r.target - r.req.output_tokens for r in running)
        if m <= 1:
            return 1
        D = len(running)
        C0 = sum(r.c for r in running) + D
        base = p.a + p.weight_read_s(D) + p.d * D
        e = p.e
        if horizon < INF:
            delta = horizon - now
            alpha, beta = e * D / 2.0, base + e * C0 - e * D / 2.0
            if alpha > 0:
                j = math.ceil((-beta + math.sqrt(beta * beta + 4 * alpha * delta)) / (2 * alpha))
            else:
                j = math.ceil(delta / beta)
            j = max(1, j)

            def span(k: int) -> float:
                return k * base + e * (k * C0 + D * k * (k - 1) / 2.0)

            while j > 1 and span(j - 1) >= delta:
                j -= 1
            while span(j) < delta:
                j += 1
            m = min(m, j)
        # KV: blocks for m steps beyond the one already allocated must be free (no preemption)
        def blocks(k: int) -> int:
            return sum(n for r in running if (n := -(-(r.c + k) // bs) - r.req.kv_blocks) > 0)
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

    def run(self, running: Sequence[SimRequest], m: int) -> tuple[float, float]:
        """Advance every running call by `m` decode steps, `m - 1` of them sampled; returns the
        seconds until the last step starts and until it ends."""
        pool, bs, p, cache = self.pool, self.bs, self.p, self.cache
        D = len(running)
        C0 = sum(r.c for r in running) + D
        base = p.a + p.weight_read_s(D) + p.d * D

        def span(k: int) -> float:
            return k * base + p.e * (k * C0 + D * k * (k - 1) / 2.0)

        total = 0
        for r in running:
            need = -(-(r.c + m) // bs) - r.req.kv_blocks
            if need > 0:
                total += need
                r.req.kv_blocks += need
        if total:                           # (from the queue's head in one go, as one by one)
            pool.take(total)
        for r in running:                   # m steps scheduled, m - 1 of them already sampled
            c = r.c
            end = c + m
            r.c = r.done_hi = end
            f_old, f_new = c // bs, end // bs
            if f_new > f_old:
                cache.extend(r, f_old, f_new)
            r.req.output_tokens += m - 1
        counters = self.counters
        counters.steps += m
        counters.batches += 1
        counters.decode_tokens += D * m
        return span(m - 1), span(m)
