"""Paged KV cache with a hash-based prefix cache, simulated in runs of blocks instead of single blocks.

vLLM keeps one free queue of blocks: a freed request appends its blocks tail-first (so a prompt's
last blocks are evicted first), allocation pops from the head and evicts the popped block's hash,
and a prefix-cache hit pulls a cached block out of the queue (`touch`). Block hashes are chained,
so a cached block is only reachable through all blocks before it.

We keep the same behaviour at the granularity of *runs*:

- A `Chain` is one sequence of content-addressed blocks: the blocks of one system prompt (shared by
  every session with that `system_prompt_id`) or one stretch of a session's own context. Its blocks
  `[0, top)` exist; holders (requests, pins) each reference a prefix `[0, x)`, so blocks below
  `ref_hi = max x` are referenced and blocks `[ref_hi, top)` sit in the free queue. `cap` limits
  hits when the content past it was rewritten (context condensation).
- An `Entry` of the free queue is what one release appended for one chain: `cached` blocks of that
  chain (evicted top-down) after `hashless` blocks (partial or duplicate blocks, evicted first).
  Older entries of a chain hold its higher blocks, so evicting from the queue head always takes the
  chain's top block, and a hit always takes the chain's newest entry from below.

Costs are per run, not per block, which keeps 30k calls of tens of thousands of tokens fast.
A second request computing blocks another holder already made (concurrent cold-start prefills of
one system prompt) shares the existing blocks instead of keeping a duplicate copy as vLLM would.
"""
from __future__ import annotations

from collections import deque

INF = 1 << 62


class KVError(RuntimeError):
    """An impossible KV operation: a bug in the engine, never a property of the workload."""


class Chain:
    __slots__ = ("top", "cap", "holders", "ref_hi", "entries")

    def __init__(self) -> None:
        self.top = 0                       # blocks that exist (referenced or cached in the queue)
        self.cap = INF                     # blocks past `cap` can no longer be hit (stale content)
        self.holders: dict[int, int] = {}  # prefix length x -> number of holders referencing [0, x)
        self.ref_hi = 0
        self.entries: deque[Entry] = deque()   # this chain's free-queue entries, oldest first

    @property
    def hittable(self) -> int:
        return self.top if self.top < self.cap else self.cap


class Entry:
    __slots__ = ("chain", "cached", "hashless")

    def __init__(self, chain: Chain | None, cached: int, hashless: int) -> None:
        self.chain, self.cached, self.hashless = chain, cached, hashless


class BlockPool:
    """All KV blocks of the engine: the free queue (with the prefix cache) and chain bookkeeping."""

    def __init__(self, total: int) -> None:
        if total < 1:
            raise ValueError(f"KV cache needs at least one block, got {total}")
        self.total = total
        self.free = total                  # blocks in the free queue (cached or not), as vLLM counts
        self.queue: deque[Entry] = deque([Entry(None, 0, total)])
        self.evicted = 0                   # cached blocks whose hash was dropped by allocation
        self.allocated = 0                 # blocks ever taken from the queue (allocations + hits)
        self.returned = 0                  # blocks ever put back

    # ---- the free queue -----------------------------------------------------------------------

    def take(self, n: int) -> None:
        """Allocate `n` fresh blocks from the queue head, evicting cached ones as needed."""
        if n > self.free:
            raise KVError(f"allocate {n} blocks with only {self.free} free")
        self.free -= n
        self.allocated += n
        q = self.queue
        while n:
            e = q[0]
            if e.hashless:
                k = e.hashless if e.hashless < n else n
                e.hashless -= k
                n -= k
            if n and e.cached:
                chain = e.chain
                if chain is None:
                    raise KVError("cached blocks in the free queue without a prefix chain")
                k = e.cached if e.cached < n else n
                e.cached -= k
                chain.top -= k
                self.evicted += k
                n -= k
                if not e.cached:
                    if chain.entries[0] is not e:
                        raise KVError("eviction order broken: the queue head is not its chain's oldest entry")
                    chain.entries.popleft()
                    e.chain = None
            if not e.hashless and not e.cached:
                q.popleft()

    def put_hashless(self, n: int) -> None:
        if n > 0:
            self.queue.append(Entry(None, 0, n))
            self.free += n
            self.returned += n

    def _touch(self, chain: Chain, k: int) -> None:
        """Pull the `k` lowest free blocks of `chain` (its newest entries) out of the queue."""
        self.free -= k
        self.allocated += k
        entries = chain.entries
        while k:
            e = entries[-1]
            t = e.cached if e.cached < k else k
            e.cached -= t
            k -= t
            if not e.cached:
                entries.pop()
                e.chain = None          # stays in the queue while it still holds hashless blocks

    # ---- holders --------------------------------------------------------------------------------

    def acquire(self, chain: Chain, x: int) -> None:
        """A new holder references `[0, x)` of existing blocks (a prefix-cache hit)."""
        if x > chain.top:
            raise KVError(f"hit of {x} blocks on a chain of {chain.top}")
        if x > chain.ref_hi:
            self._touch(chain, x - chain.ref_hi)
            chain.ref_hi = x
        h = chain.holders
        h[x] = h.get(x, 0) + 1

    def touched_by(self, chain: Chain, x: int) -> int:
        """Free-queue blocks a hit of `[0, x)` on `chain` would pull out (they stop counting as free)."""
        return x - chain.ref_hi if x > chain.ref_hi else 0

    def extend(self, chain: Chain, x_old: int, n: int) -> int:
        """A holder of `[0, x_old)` completed `n` more blocks; returns how many of its own
        blocks became redundant (the chain already had them) and were freed."""
        top = chain.top
        end = x_old + n
        joined = (end if end < top else top) - x_old if x_old < top else 0
        if joined > 0:
            lo = x_old if x_old > chain.ref_hi else chain.ref_hi
            hi = end if end < top else top
            if hi > lo:
                self._touch(chain, hi - lo)
            self.put_hashless(joined)
        if end > top:
            chain.top = end
        h = chain.holders
        c = h[x_old] - 1
        if c:
            h[x_old] = c
        else:
            del h[x_old]
        h[end] = h.get(end, 0) + 1
        if end > chain.ref_hi:
            chain.ref_hi = end
        return joined if joined > 0 else 0

    def release(self, chain: Chain, x: int, hashless: int = 0) -> None:
        """A holder of `[0, x)` lets go; blocks nobody references any more join the queue tail
        (after `hashless` private blocks of the same release, which are evicted first)."""
        h = chain.holders
        c = h.get(x, 0)
        if c <= 0:
            raise KVError(f"release of an unheld prefix of {x} blocks")
        if c > 1:
            h[x] = c - 1
            freed = 0
        else:
            del h[x]
            if x == chain.ref_hi:
                new_hi = max(h) if h else 0
                freed = x - new_hi
                chain.ref_hi = new_hi
            else:
                freed = 0
        if freed:
            e = Entry(chain, freed, hashless)
            self.queue.append(e)
            chain.entries.append(e)
            self.free += freed + hashless
            self.returned += freed + hashless
        else:
            self.put_hashless(hashless)

    # ---- checks ---------------------------------------------------------------------------------

    def check(self, chains, private_blocks: int) -> None:
        """Invariants (tests): every block is free, referenced by a chain, or private to a request."""
        queued = sum(e.hashless + e.cached for e in self.queue)
        if queued != self.free or self.free < 0:
            raise KVError(f"free count {self.free} != queued blocks {queued}")
        referenced = 0
        for ch in chains:
            cached = sum(e.cached for e in ch.entries)
            if ch.top - ch.ref_hi != cached:
                raise KVError(f"chain: top {ch.top} - ref_hi {ch.ref_hi} != cached {cached}")
            if ch.ref_hi != (max(ch.holders) if ch.holders else 0):
                raise KVError("chain: ref_hi is not the longest held prefix")
            referenced += ch.ref_hi
        if self.free + referenced + private_blocks != self.total:
            raise KVError(f"blocks leaked: free {self.free} + referenced {referenced} + private "
                          f"{private_blocks} != total {self.total}")
