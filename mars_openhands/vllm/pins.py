"""Warm-resume KV pins on vLLM's block pool: taking, releasing, expiring and revoking them.

A pin is one `block_pool.touch` of a finished call's full, hashed, non-null blocks (what the next
turn's prefix lookup can hit), released by exactly one `block_pool.free_blocks`. Which session holds
which pin, until when, and which pin yields first are the policy's decisions (`Policy.record_pin`,
`expired_pins`, `revocation_order`); this module carries them out on the blocks, counts each
release by its reason and records it in the session's history.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from operator import attrgetter
from typing import TYPE_CHECKING, cast

from mars_openhands.core import Pin, PinOffer, Policy
from mars_openhands.vllm.release.compat import free_blocks
from mars_openhands.vllm.request_table import TrackedRequest

if TYPE_CHECKING:
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.kv_cache_utils import KVCacheBlock

    from mars_openhands.vllm.history import SessionHistory

#: Counter of each pin-release reason whose name is not `pins_released_on_<reason>`.
_PIN_COUNTERS = {"resume": "pins_resumed", "ttl": "pins_expired", "revoked": "pins_revoked"}

_REF_CNT = attrgetter("ref_cnt")


class PinnedBlocks:
    """The blocks that live pins hold, grouped by how many pins hold each.

    It changes only when a pin is taken or released, so it is kept as they happen. The count of
    blocks only pins reference then reads each pinned block's ref count once, in C (`map`), and
    does not rebuild the multiset from every pin at each control period.
    """

    def __init__(self) -> None:
        self._holders: dict[int, int] = {}                           # block id -> pins holding it
        self._by_holders: dict[int, dict[int, KVCacheBlock]] = {}    # k -> {id: block k pins hold}

    def __len__(self) -> int:
        """Distinct blocks pinned."""
        return len(self._holders)

    def add(self, blocks: Iterable[KVCacheBlock]) -> None:
        for b in blocks:
            self._move(b, self._holders.get(b.block_id, 0), 1)

    def remove(self, blocks: Iterable[KVCacheBlock]) -> None:
        for b in blocks:
            self._move(b, self._holders[b.block_id], -1)

    def _move(self, block: KVCacheBlock, k: int, step: int) -> None:
        """`block`, held by `k` pins, is now held by `k + step`."""
        i, groups = block.block_id, self._by_holders
        if k:
            group = groups[k]
            del group[i]
            if not group:
                del groups[k]
        k += step
        if k:
            self._holders[i] = k
            groups.setdefault(k, {})[i] = block
        else:
            del self._holders[i]

    def revocable(self) -> int:
        """Blocks no request references: a block k pins hold whose ref count is k."""
        return sum(list(map(_REF_CNT, group.values())).count(k) for k, group in self._by_holders.items())


class PinKeeper:
    """Pins' blocks on one KV cache manager; `clock` and `history` are read at each use (tests swap
    the scheduler's)."""

    def __init__(self, policy: Policy, kv: KVCacheManager, counters: Counter[str],
                 clock: Callable[[], float], history: Callable[[], SessionHistory]) -> None:
        self.policy, self.kv, self.counters = policy, kv, counters
        self.clock, self.history = clock, history
        self.held = PinnedBlocks()             # every live pin's blocks, in the policy's table or not
        self.pinned = 0                        # their count per pin (a block two pins share: twice)

    def pinnable_blocks(self, rid: str) -> list[KVCacheBlock]:
        """The call's full, hashed, non-null blocks in all KV groups (what the next turn can hit)."""
        return [b for m in self.kv.coordinator.single_type_managers
                for b in m.req_to_blocks.get(rid, ())
                if not b.is_null and b.block_hash is not None]

    def take(self, session_id: str, blocks: list[KVCacheBlock], offer: PinOffer, now: float) -> None:
        """Pin `blocks` for the session as the policy offered."""
        self.kv.block_pool.touch(blocks)
        self.policy.record_pin(session_id, len(blocks), offer, now, handle=blocks)
        self.held.add(blocks)
        self.pinned += len(blocks)
        self.counters["pins_created"] += 1
        self.history().add(session_id, now, "pin_taken", len(blocks), offer.ttl_s)

    def release(self, pin: Pin, reason: str) -> None:
        """Release one pin: exactly one `free_blocks` per `touch`, tail blocks evicted first.

        `reason`: resume, ttl, revoked, finish, abort, reset, or the event type that released it.
        """
        blocks = cast("list[KVCacheBlock] | None", pin.handle)    # what `take` pinned
        if blocks is None:
            raise RuntimeError(f"pin of session {pin.session_id!r} released twice")
        pin.handle = None
        self.held.remove(blocks)
        self.pinned -= len(blocks)
        # A revoked pin's session is one the policy chose to stop retaining: on vLLM >= 0.34 its
        # blocks go to the front of the free queue, evicted before other cached blocks.
        free_blocks(self.kv.block_pool, reversed(blocks), evict_first=reason == "revoked")
        self.counters[_PIN_COUNTERS.get(reason, f"pins_released_on_{reason}")] += 1
        now = self.clock()
        self.history().add(pin.session_id, now, "pin_released", reason, pin.blocks, now - pin.pinned_s)

    def expire(self, now: float) -> None:
        for pin in self.policy.expired_pins(now):
            self.release(pin, "ttl")

    def revoke(self) -> Iterator[None]:
        """Revoke pins in the policy's order, yielding after each one (the caller retries then)."""
        for pin in self.policy.revocation_order():
            if self.policy.release_pin(pin.session_id) is None:
                continue
            self.release(pin, "revoked")
            yield

    def release_resume(self, rec: TrackedRequest, reason: str) -> bool:
        """Release the resume pin `rec` still holds, if any (True if it held one)."""
        pin, rec.resume_pin = rec.resume_pin, None
        if pin is None:
            return False
        self.release(pin, reason)
        return True

    def revocable_blocks(self) -> int:
        """Blocks only pins reference (what revoking every pin frees): a block pinned k times is
        revocable iff its ref count is k, so pins sharing a prefix, or pinning what a running
        call also holds, are not counted as capacity they cannot give back. Every live pin
        counts, whether the policy's table lists it or a resuming call's prefix lookup waits on it."""
        return self.held.revocable()
