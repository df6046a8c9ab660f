"""Liveness: with sessions parked, the engine never idles longer than the control plane promises."""
from __future__ import annotations

from collections.abc import Sequence

import pytest

from mars_openhands.core.context import PolicyContext
from mars_openhands.core.model import Session
from mars_openhands.core.strategies import Admission
from mars_openhands.sim.engine import SimulationError

from .helpers import TINY, custom_policy, growing, make_engine


class LateAdmission(Admission):
    """Promises one control period but admits nothing before `open_s` (a broken control plane)."""

    def __init__(self, open_s: float) -> None:
        self.open_s = open_s
        self.now = 0.0

    def tick(self, ctx: PolicyContext) -> None:
        self.now = ctx.now

    def liveness_bound_s(self, ctx: PolicyContext) -> float | None:
        return self.interval_s

    def select(self, backlog: Sequence[Session], ctx: PolicyContext) -> list[Session]:
        return list(backlog) if ctx.now >= self.open_s else []


def test_mars_never_idles_while_sessions_are_parked_even_when_tools_hold_everyone():
    # 12 sessions with long tools on a scarce cache: MARS parks most of them; every time all the
    # admitted ones sit in tools, the engine must take another within one control period.
    sessions = [growing(f"s{i}", 0.05 * i, 6, first=600, grow=200, out=30, tool=3.0) for i in range(12)]
    eng = make_engine(sessions, policy="mars", kv_blocks=200)
    eng.run()                                          # check=True: liveness checked at every idle spell
    assert eng.counters.done == 12


def test_a_control_plane_that_breaks_its_promise_is_caught():
    sessions = [growing(f"s{i}", 0.1 * i, 2, first=300, tool=0.5) for i in range(3)]
    policy = custom_policy(TINY, admission=LateAdmission(open_s=5.0))
    eng = make_engine(sessions, policy=policy)
    with pytest.raises(SimulationError, match="liveness: engine idle"):
        eng.run()
