"""Test-only strategies that make one adapter mechanism observable at a time.

The adapter must work for any composition of the core's strategy roles, so these doubles pick
extreme, easy-to-assert rules (a fixed key, a tiny quantum, always pin, a closed gate).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mars_openhands.core import PinOffer, Policy
from mars_openhands.core.chunking import NoShrink, ShrinkToRoom
from mars_openhands.core.ordering import FcfsOrdering
from mars_openhands.core.retention import NoRetention
from mars_openhands.core.strategies import Admission, Ordering, VictimSelector
from mars_openhands.core.victim import NewestVictim


@dataclass
class KeyOrdering(Ordering):
    keyfn: Callable = lambda r: (r.arrival_s,)
    quantum: int | None = None
    max_active: int | None = None

    def key(self, req, ctx):
        return self.keyfn(req)

    def prefill_quantum(self, req, ctx):
        return self.quantum


class AlwaysPin(NoRetention):
    def __init__(self, ttl_s: float = 60.0):
        self.ttl_s = ttl_s

    def pin_ttl(self, session, context_tokens, blocks, ctx):
        return PinOffer(self.ttl_s, value_density=float(blocks))


class MostBlocksVictim(VictimSelector):
    def choose(self, candidates: Sequence, ctx):
        return max(candidates, key=lambda r: (r.kv_blocks, r.arrival_s))


class Gate(Admission):
    """Admits every parked session once `open` is set; never before."""

    interval_s = 0.0

    def __init__(self):
        self.open = False

    def select(self, backlog, ctx):
        return list(backlog) if self.open else []


def install(sched, ordering=None, shrink=False, victim=None, retention=None, admission=None,
            max_pinned_fraction=0.5) -> Policy:
    """Replace the scheduler's policy by a composition of doubles (same context object)."""
    sched.mars = Policy("test", ordering or FcfsOrdering(), ShrinkToRoom() if shrink else NoShrink(),
                          victim or NewestVictim(), retention or NoRetention(), admission,
                          sched.mars.ctx, max_pinned_fraction=max_pinned_fraction)
    return sched.mars
