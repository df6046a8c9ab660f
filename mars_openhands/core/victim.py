"""Preemption victim selection."""
from __future__ import annotations

from collections.abc import Callable, Sequence

from mars_openhands.core.context import PolicyContext
from mars_openhands.core.model import Request
from mars_openhands.core.strategies import VictimSelector


class NewestVictim(VictimSelector):
    """vLLM FCFS: preempt the most recently arrived running request."""

    def choose(self, candidates: Sequence[Request], ctx: PolicyContext) -> Request:
        return max(candidates, key=lambda r: r.arrival_s)


def feedback_level(req: Request) -> int:
    """The level an ordering keeps in `req.level` (Autellix: its PLAS queue)."""
    return req.level


class LevelBlocksArrivalVictim(VictimSelector):
    """MARS / Autellix: preempt the lowest-priority request (the highest level), then by KV blocks
    held, then the newest. Autellix (`largest`) takes the largest: max over (level, blocks,
    arrival). MARS takes the smallest of its lowest level: the one whose loss costs the least
    recompute, since a preempted request computes everything it held again, and any block freed
    lets the requester go on (chunk shrinking). With `spare_decode`, decoding requests count as
    level -1 (MARS: evict prefills first, keep decoders streaming); Autellix ranks decoders by
    their level."""

    def __init__(self, level_of: Callable[[Request], int] = feedback_level,
                 spare_decode: bool = True, largest: bool = True) -> None:
        self.level_of = level_of
        self.spare_decode = spare_decode
        self.largest = largest

    def rank(self, req: Request) -> tuple[int, int, float]:
        blocks = req.kv_blocks if self.largest else -req.kv_blocks
        if self.spare_decode and not req.is_prefill:
            return (-1, blocks, req.arrival_s)
        return (self.level_of(req), blocks, req.arrival_s)

    def choose(self, candidates: Sequence[Request], ctx: PolicyContext) -> Request:
        return max(candidates, key=self.rank)


class ContinuumVictim(VictimSelector):
    """Continuum: preempt the running request whose session entered latest (program-level FCFS
    in reverse). Continuum also spares requests it knows are a session's last step; no engine
    knows that in advance here (no clairvoyance), so that tie-break is left out. When at most one
    request runs, Continuum drops a pin instead: that is the revocation order of its retention
    rules (`continuum._ContinuumRetention.revocation_order`)."""

    def choose(self, candidates: Sequence[Request], ctx: PolicyContext) -> Request:
        sessions = ctx.sessions

        def entered(r: Request) -> tuple[float, float]:
            s = sessions.get(r.session_id)
            return (s.first_arrival_s if s is not None else r.arrival_s, r.arrival_s)
        return max(candidates, key=entered)
