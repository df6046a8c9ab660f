"""The engine's waiting queue (vLLM's `waiting`), in the policy's order.

Single-stepping re-sorts it with `Policy.order` at every step, as the vLLM adapter does. With the
decode fast-forward on, it is kept sorted instead: a full re-sort at most every `REORDER_S`, and
a call that joins in between is placed by its key, so a static order (FCFS) is exactly the
policy's and a time-varying one (aging) is at most `REORDER_S` stale. A static order's keys never
change, so its kept order is what a re-sort would give: the re-sort is only counted, not done
(FCFS queues hold hundreds of calls). For the same reason a head
that could not be admitted is not tried again until blocks were freed or pinned (a new pin can be
revoked for it), the queue changed, or `REORDER_S` passed (`may_admit`).
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterator

from mars_openhands.core.model import Request
from mars_openhands.core.policy import Policy
from mars_openhands.sim.entities import SimRequest

#: Longest the kept order may go without a full re-sort (and a blocked head without a retry).
REORDER_S = 0.2


class WaitingQueue:
    __slots__ = ("policy", "keep_sorted", "static", "items", "version", "demand_tokens", "_keys",
                 "_sorted_at", "_view", "_view_stale", "_blocked")

    def __init__(self, policy: Policy, keep_sorted: bool) -> None:
        self.policy = policy
        self.keep_sorted = keep_sorted
        #: request FCFS: a call's key is its arrival, fixed while it waits
        self.static = policy.stock_order
        self.items: list[SimRequest] = []
        #: bumped on every change of the queue's content or order, and at every re-sort
        self.version = 0
        #: tokens (prompt + outputs so far) of every queued call: the KV the queue will need
        self.demand_tokens = 0
        self._keys: list | None = None         # policy keys of `items` while kept sorted
        self._sorted_at = -math.inf
        self._view: list[Request] = []
        self._view_stale = False      # content or order changed since `_view` was built
        #: (free blocks, version, until): the head failed to fit then; with no more free blocks
        #: and the same queue it still fails
        self._blocked: tuple[int, int, float] | None = None

    def __len__(self) -> int:
        return len(self.items)

    def __bool__(self) -> bool:
        return bool(self.items)

    def __iter__(self) -> Iterator[SimRequest]:
        return iter(self.items)

    def insert(self, r: SimRequest, now: float, front: bool = False) -> None:
        """Add a call (a preempted one at the `front` of its equals), at its place in the kept order."""
        req = r.req
        if self._keys is None:
            if front:
                self.items.insert(0, r)
            else:
                self.items.append(r)
        else:
            k = self.policy.sort_key(now)(req)
            i = (bisect_left if front else bisect_right)(self._keys, k)
            self.items.insert(i, r)
            self._keys.insert(i, k)
        self.version += 1
        self._view_stale = True
        self.demand_tokens += req.prompt_tokens + req.output_tokens

    def order(self, now: float) -> None:
        """Sort by the policy's order (see the module docstring for when a kept order is reused)."""
        items = self.items
        if len(items) < 2:
            return
        if not self.keep_sorted:
            key = self.policy.sort_key(now)
            self.items = sorted(items, key=lambda r: key(r.req))
            self.version += 1
            self._view_stale = True
        elif self._keys is not None and self.static:
            if now >= self._sorted_at + REORDER_S:      # (a re-sort would keep the kept order)
                self._sorted_at = now
                self.version += 1
        elif self._keys is None or now >= self._sorted_at + REORDER_S:
            keys = self.policy.keys([r.req for r in items], now)
            idx = sorted(range(len(items)), key=keys.__getitem__)
            self.items = [items[i] for i in idx]
            self._keys = [keys[i] for i in idx]
            self._sorted_at = now
            self.version += 1
            self._view_stale = True

    def pop_head(self, k: int) -> list[SimRequest]:
        """Take the first `k` calls (admission takes a prefix of the ordered queue)."""
        head = self.items[:k]
        del self.items[:k]
        if self._keys is not None:
            del self._keys[:k]
        self.version += 1
        self._view_stale = True
        for r in head:
            self.demand_tokens -= r.req.prompt_tokens + r.req.output_tokens
        return head

    def requests(self) -> list[Request]:
        """The queued calls as the policy sees them (rebuilt only when the queue changed)."""
        if self._view_stale:
            self._view = [r.req for r in self.items]
            self._view_stale = False
        return self._view

    def may_admit(self, free_blocks: int, now: float) -> bool:
        """False while the head is known not to fit (see the module docstring)."""
        b = self._blocked
        return (b is None or free_blocks > b[0] or self.version != b[1] or now >= b[2]
                or not self.keep_sorted)

    def note_admission(self, admitted: bool, free_blocks: int, now: float) -> None:
        self._blocked = None if admitted else (free_blocks, self.version, now + REORDER_S)
