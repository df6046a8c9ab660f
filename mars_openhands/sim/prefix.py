"""Where a session's tokens live in the KV cache: prefix lookup, growth and release of its blocks.

A session's prompt is its system prompt (blocks shared by every session with the same
`system_prompt_id`, one `Chain`) followed by its own context: runs of blocks (`SimSession.segments`,
one `Chain` each). Appending context extends the last run; when a turn's prompt stops sharing a
prefix with what is cached (condensed history, or blocks before it were evicted), the content from
there on is new and goes into a fresh run, so stale blocks can never be hit again.
"""
from __future__ import annotations

from mars_openhands.sim.entities import SimRequest, SimSession
from mars_openhands.sim.kv import BlockPool, Chain, KVError


class SessionCache:
    def __init__(self, pool: BlockPool, block_size: int, check: bool = False) -> None:
        self.pool = pool
        self.bs = block_size
        self.check = check
        self.system: dict[str, Chain] = {}
        self.chains: list[Chain] = []          # every chain made (kept for invariant checks only)

    def system_chain(self, prompt_id: str) -> Chain:
        ch = self.system.get(prompt_id)
        if ch is None:
            ch = self.system[prompt_id] = Chain()
            self.chains.append(ch)
        return ch

    def lookup(self, r: SimRequest) -> tuple:
        """Read-only prefix-cache lookup: (hit blocks, free-queue blocks the hit pulls out, plan...).

        The system prompt's blocks come first (shared chain), then the session's own runs up to
        the first block that is not cached; a new turn may only hit what it shares with the last
        turn (`valid_blocks`), a resumed call all of its own tokens. vLLM never hits the last token.
        """
        pool, s, req = self.pool, r.sess, r.req
        limit = (req.prompt_tokens + req.output_tokens - 1) // self.bs
        S = s.sys_blocks
        hit = touched = hs = 0
        ch = s.sys_chain
        if ch is not None:                 # the session has S > 0 system-prompt blocks
            hs = ch.hittable
            if hs > S:
                hs = S
            if hs > limit:
                hs = limit
            touched = pool.touched_by(ch, hs)
            hit = hs
            if hs < S and hs < limit:
                return hit, touched, hs, None, -1
        if r.first_hit < 0 and r.valid_blocks < limit:   # a new turn: only the shared prefix is valid
            limit = r.valid_blocks
        takes = []
        stopped = -1
        for j, (ch, _) in enumerate(s.segments):
            t = ch.hittable
            room = limit - hit
            if t > room:
                t = room if room > 0 else 0
            takes.append(t)
            touched += pool.touched_by(ch, t)
            hit += t
            if t < ch.cap:
                stopped = j
                break
        return hit, touched, hs, takes, stopped

    def commit(self, r: SimRequest, plan: tuple) -> bool:
        pool, s, req, bs = self.pool, r.sess, r.req, self.bs
        """Take the blocks `lookup` found (refcounts up, out of the free queue) and set where the
        call's new blocks go; True on the call's first lookup (its prefix hit counts)."""
        hit, _, sys_hit, takes, stopped = plan
        holds = []
        S = s.sys_blocks
        if s.sys_chain is not None:        # S > 0
            pool.acquire(s.sys_chain, sys_hit)
            holds.append([s.sys_chain, sys_hit])
        segs = s.segments
        if takes is None:          # the system prompt missed: the session's own blocks are unreachable
            self.fork(s, 0, S)
        else:
            for j, t in enumerate(takes):
                if t > 0:
                    pool.acquire(segs[j][0], t)
                    holds.append([segs[j][0], t])
            if stopped < 0:        # no context of its own yet (first turn)
                self.fork(s, len(segs), S + sum(takes))
            else:
                ch = segs[stopped][0]
                if not (stopped == len(segs) - 1 and takes[stopped] == ch.top):
                    # what follows the hit differs from what is cached: new content, new chain
                    t = takes[stopped]
                    self.fork(s, stopped + 1 if t else stopped, hit)
                    if t:
                        ch.cap = min(ch.cap, t)
        wch, wstart = s.segments[-1]
        if not (holds and holds[-1][0] is wch):
            pool.acquire(wch, 0)
            holds.append([wch, 0])
        r.write_idx = len(holds) - 1
        r.write_start = wstart
        r.holds = holds
        r.c = hit * bs
        req.computed_tokens = min(r.c, req.prompt_tokens)
        req.kv_blocks = hit
        req.cached_tokens = hit * bs
        if r.first_hit >= 0:
            return False
        r.first_hit = r.done_hi = hit * bs
        return True

    def fork(self, s: SimSession, keep: int, start: int) -> None:
        """Content from block `start` on is new: a fresh chain replaces segments `keep` and later."""
        for ch, _ in s.segments[keep:]:
            ch.cap = 0
        ch = Chain()
        if self.check:
            self.chains.append(ch)
        s.segments = s.segments[:keep] + [(ch, start)]

    def extend(self, r: SimRequest, f_old: int, f_new: int) -> None:
        """The call completed full blocks [f_old, f_new): they join its chains (hashed, hittable)."""
        pool = self.pool
        S = r.sess.sys_blocks
        if f_old < S:
            e = f_new if f_new < S else S
            h = r.holds[0]
            pool.extend(h[0], h[1], e - f_old)
            h[1] += e - f_old
            f_old = e
        if f_new > f_old:
            h = r.holds[r.write_idx]
            if self.check and h[1] != f_old - r.write_start:
                raise KVError(f"write chain holds {h[1]} blocks but the request is at block {f_old}")
            pool.extend(h[0], h[1], f_new - f_old)
            h[1] += f_new - f_old

    def release(self, holds: list, private: int) -> None:
        """Drop a call's (or pin's) references, tail first, with its `private` unhashed blocks."""
        pool = self.pool
        for ch, x in reversed(holds):
            pool.release(ch, x, private)
            private = 0
        if private:
            pool.put_hashless(private)

    @staticmethod
    def private(r: SimRequest) -> int:
        """Blocks the call holds that no chain knows (partial or not yet computed)."""
        return r.req.kv_blocks - sum(h[1] for h in r.holds)
