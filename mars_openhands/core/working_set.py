"""The admitted sessions' KV working set and the KV window over it (MARS' GPU plane of admission;
the rule is in `admission.py`'s module docstring).

`WorkingSet` holds the admitted sessions and sums their predicted footprints (`footprints`);
`KvWindow` moves the window K = resident / engaged share that the footprints must fit.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from mars_openhands.core.context import PolicyContext
from mars_openhands.core.model import Session

#: EMA weight of the engaged and tool shares per tick (0.2 s): a time constant of about 4 s,
#: several LLM turns, so one burst of tool completions does not swing the limits.
SHARE_EMA = 0.05
#: Floor of both shares: K is at most 20 x what fits resident and cpu_cap 20 x the paper's
#: (sessions that spend 95 % of their time on one plane; below that the estimate rests on too
#: few sessions on the other).
MIN_SHARE = 0.05


def footprints(ctx: PolicyContext) -> Callable[[Session], int]:
    """`footprint(s)`: the blocks `s` is predicted to need at its next turn, its context so far
    plus one turn's measured growth (built once per pass: it runs for every admitted session at
    every tick)."""
    growth, block_size = round(ctx.turn_growth_tokens), ctx.kv.block_size

    def footprint(s: Session) -> int:
        c, p = s.context_tokens, s.prompt_tokens     # (not max(): this is the hottest call)
        return -(-((c if c > p else p) + growth) // block_size)
    return footprint


@dataclass
class WorkingSet:
    """The admitted sessions and their predicted KV footprint (re-summed at each tick)."""

    sessions: dict[str, Session] = field(default_factory=dict)
    blocks: int = 0
    #: As of the last `refresh`: footprint and count of the sessions with a call in the engine, and
    #: the count of the others in a tool (or, sending no tool events, anywhere out of the engine).
    engaged_blocks: int = 0
    in_engine: int = 0
    in_tools: int = 0
    #: Sessions that ended while admitted, and the footprints they had then: what a session grows
    #: to (`grown_blocks`), where the sessions admitted now may still be small.
    ended: int = 0
    ended_blocks: int = 0
    #: `youngest_first`, kept until a session joins or leaves (ticks read it far more often)
    _youngest: list[Session] | None = field(default=None, repr=False)

    def add(self, s: Session, ctx: PolicyContext) -> None:
        self.sessions[s.session_id] = s
        self.blocks += footprints(ctx)(s)
        self._youngest = None

    def remove(self, s: Session, ctx: PolicyContext) -> None:
        """Take `s` out now (paused), its footprint with it."""
        if self.sessions.pop(s.session_id, None) is not None:
            self.blocks -= footprints(ctx)(s)
            self._youngest = None

    def refresh(self, ctx: PolicyContext) -> None:
        """Drop sessions that left the window (ended, idle-released, suspended); re-sum, also
        the part with a call in the engine (one pass: this runs at every tick)."""
        gone: list[str] = []
        growth, block_size, known = round(ctx.turn_growth_tokens), ctx.kv.block_size, ctx.sessions
        blocks = engaged_blocks = in_engine = in_tools = 0
        for sid, s in self.sessions.items():
            c, p = s.context_tokens, s.prompt_tokens     # (`footprints`, inlined: per tick)
            fp = -(-((c if c > p else p) + growth) // block_size)
            if not (s.holds_slot and not s.ended and known.get(sid) is s):
                gone.append(sid)
                if s.ended:
                    self.ended += 1
                    self.ended_blocks += fp
                continue
            blocks += fp
            if s.turns > s.turns_finished:
                engaged_blocks += fp
                in_engine += 1
            elif s.in_tool is not None or not s.reports_tools:
                in_tools += 1
        if gone:
            for sid in gone:
                del self.sessions[sid]
            self._youngest = None
        self.blocks, self.engaged_blocks, self.in_engine, self.in_tools = blocks, engaged_blocks, in_engine, in_tools

    def grown_blocks(self) -> float | None:
        """The mean footprint of the sessions that ended while admitted (None before the first)."""
        return self.ended_blocks / self.ended if self.ended else None

    def youngest_first(self) -> list[Session]:
        """Every session but the oldest, youngest (latest admitted, then latest arrived) first,
        ties in the order they joined. Read-only: it is shared until the set changes."""
        if self._youngest is None:
            self._youngest = sorted(self.sessions.values(),
                                    key=lambda s: (-(s.admitted_s or 0.0), -s.first_arrival_s))[:-1]
        return self._youngest


@dataclass
class KvWindow:
    """The KV window K in blocks: what fits resident over an EMA of the working set's engaged share
    (pausing admitted sessions reads it), and over the share's recent peak (it follows a rise at
    once and falls back at the EMA's rate; admitting new sessions reads it)."""

    engaged_share: float = 1.0
    engaged_peak: float = 1.0
    blocks: float = math.inf           # set from the cache at the first tick
    admit_blocks: float = math.inf

    def move(self, ws: WorkingSet, resident: int, shared: bool = True) -> None:
        """One tick: the engaged share of `ws` (as of its last `refresh`) moves both windows.
        Not `shared` (the cache is the bottleneck): both are what fits resident at once."""
        share = ws.engaged_blocks / ws.blocks if ws.blocks else 1.0
        self.engaged_share += SHARE_EMA * (share - self.engaged_share)
        self.engaged_peak = max(share, self.engaged_peak + SHARE_EMA * (share - self.engaged_peak))
        if not shared:
            self.blocks = self.admit_blocks = resident
            return
        self.blocks = resident / max(self.engaged_share, MIN_SHARE)
        self.admit_blocks = resident / max(self.engaged_peak, MIN_SHARE)
