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
from typing import TYPE_CHECKING, cast

from mars_openhands.core import Pin, PinOffer, Policy
from mars_openhands.vllm.release.compat import free_blocks

if TYPE_CHECKING:
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.kv_cache_utils import KVCacheBlock

    from mars_openhands.vllm.history import SessionHistory

#: Counter of each pin-release reason whose name is not `pins_released_on_<reason>`.
_PIN_COUNTERS = {"resume": "pins_resumed", "ttl": "pins_expired", "revoked": "pins_revoked"}


class PinKeeper:
    """Pins' blocks on one KV cache manager; `clock` and `history` are read at each use (tests swap
    the scheduler's)."""

    def __init__(self, policy: Policy, kv: KVCacheManager, counters: Counter[str],
                 clock: Callable[[], float], history: Callable[[], SessionHistory]) -> None:
        self.policy, self.kv, self.counters = policy, kv, counters
        self.clock, self.history = clock, history

    def pinnable_blocks(self, rid: str) -> list[KVCacheBlock]:
        """The call's full, hashed, non-null blocks in all KV groups (what the next turn can hit)."""
        return [b for m in self.kv.coordinator.single_type_managers
                for b in m.req_to_blocks.get(rid, ())
                if not b.is_null and b.block_hash is not None]

    def take(self, session_id: str, blocks: list[KVCacheBlock], offer: PinOffer, now: float) -> None:
        """Pin `blocks` for the session as the policy offered."""
        self.kv.block_pool.touch(blocks)
        self.policy.record_pin(session_id, len(blocks), offer, now, handle=blocks)
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

    def revocable_blocks(self, resume_pins: Iterable[Pin]) -> int:
        """Blocks only pins reference (what revoking every pin frees): a block pinned k times is
        revocable iff its ref count is k, so pins sharing a prefix, or pinning what a running
        call also holds, are not counted as capacity they cannot give back."""
        pinned: dict[int, tuple[KVCacheBlock, int]] = {}
        for pin in [*self.policy.pins(), *resume_pins]:
            for b in cast("list[KVCacheBlock] | None", pin.handle) or ():
                _, k = pinned.get(b.block_id, (b, 0))
                pinned[b.block_id] = (b, k + 1)
        return sum(1 for b, k in pinned.values() if b.ref_cnt == k)
