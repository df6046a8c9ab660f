"""The engine's side of KV pinning: which blocks each pin holds, and releasing them exactly once.

The policy decides (`Policy.on_request_finished` offers a pin, `revocation_order`, expiry, events);
this keeper holds the blocks of every `EnginePin`, whether the policy's table still lists it or
it waits for the session's next call to finish its prefix lookup, and accounts for them.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from mars_openhands.core.model import Pin, PinOffer
from mars_openhands.core.policy import Policy
from mars_openhands.sim.entities import EnginePin, SimRequest
from mars_openhands.sim.kv import BlockPool, Chain, KVError
from mars_openhands.sim.prefix import SessionCache
from mars_openhands.sim.stats import Counters


class PinKeeper:
    __slots__ = ("pool", "cache", "policy", "counters", "pins", "pinned_now")

    def __init__(self, pool: BlockPool, cache: SessionCache, policy: Policy, counters: Counters) -> None:
        self.pool, self.cache, self.policy, self.counters = pool, cache, policy, counters
        self.pins: dict[str, EnginePin] = {}   # session id -> pin the engine holds
        self.pinned_now = 0                    # blocks held by pins

    def hold(self, r: SimRequest, blocks: int, offer: PinOffer, now: float) -> Pin:
        """Keep the `blocks` full blocks of finished call `r` referenced; its partial ones go back."""
        sid = r.sess.sid
        self.pool.put_hashless(r.req.kv_blocks - blocks)
        ep = EnginePin(sid, r.holds, blocks, now)
        self.pins[sid] = ep
        self.pinned_now += blocks
        self.counters.pins_made += 1
        ep.policy_pin = self.policy.record_pin(sid, blocks, offer, now, handle=ep)
        return ep.policy_pin

    def release(self, ep: EnginePin, now: float) -> None:
        if ep.released:
            raise KVError(f"pin of session {ep.session_id!r} released twice")
        ep.released = True
        self.cache.release(ep.holds, 0)
        ep.holds = []
        self.pinned_now -= ep.blocks
        c = self.counters
        c.pinned_block_seconds += ep.blocks * (now - ep.pinned_s)
        c.pins_released += 1
        if self.pins.get(ep.session_id) is ep:
            del self.pins[ep.session_id]

    def release_policy_pins(self, pins: Iterable[Pin], now: float) -> None:
        """Release the pins the policy let go of (their handles are ours)."""
        for p in pins:
            self.release(cast(EnginePin, p.handle), now)

    def revocable_blocks(self) -> int:
        """Blocks that only pins reference: what revoking every pin would free. Pins of sessions
        sharing a system prompt hold its blocks together (once), and a pinned prefix that a
        running call also holds frees nothing."""
        by_chain: dict[Chain, dict[int, int]] = {}
        for ep in self.pins.values():
            for ch, x in ep.holds:
                if x:
                    counts = by_chain.setdefault(ch, {})
                    counts[x] = counts.get(x, 0) + 1
        blocks = 0
        for ch, pinned in by_chain.items():
            holders = ch.holders
            others = 0 if holders == pinned else max(
                (x for x, c in holders.items() if c > pinned.get(x, 0)), default=0)
            if ch.ref_hi > others:
                blocks += ch.ref_hi - others
        return blocks

    def expire(self, now: float) -> bool:
        """Release the pins the policy lets expire by `now`; True if any went."""
        if self.policy.pinned_sessions:
            expired = self.policy.expired_pins(now)
            if expired:
                self.release_policy_pins(expired, now)
                return True
        return False

    def revoke(self, need: int, now: float) -> bool:
        """Drop pins in the policy's revocation order until `need` blocks are free; True if any went."""
        pol = self.policy
        if not pol.pinned_sessions:
            return False
        dropped = False
        for pin in pol.revocation_order():
            p = pol.release_pin(pin.session_id)
            if p is not None:
                self.release(cast(EnginePin, p.handle), now)
                dropped = True
                if self.pool.free >= need:
                    break
        return dropped

    def drop_deferred(self, waiting: Iterable[SimRequest], r: SimRequest, now: float) -> bool:
        """With nothing running, pins kept for other waiting calls' lookups must not block `r`; nor,
        last, its own: a call as big as the cache (a condensed real session) cannot be allocated
        beside its previous turn's pin when that context is not its prefix, and nothing else would
        ever release it."""
        dropped = False
        for w in waiting:
            if w is not r and w.resume_pin is not None:
                ep, w.resume_pin = w.resume_pin, None
                self.release(ep, now)
                dropped = True
        if not dropped and r.resume_pin is not None:
            ep, r.resume_pin = r.resume_pin, None
            self.release(ep, now)
            dropped = True
        return dropped
