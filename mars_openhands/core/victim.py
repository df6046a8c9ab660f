"""Preemption victim selection."""
from __future__ import annotations

from typing import Sequence

from mars_openhands.core.context import PolicyContext
from mars_openhands.core.model import Request
from mars_openhands.core.strategies import VictimSelector


class NewestVictim(VictimSelector):
    """vLLM FCFS: preempt the most recently arrived running request."""

    def choose(self, candidates: Sequence[Request], ctx: PolicyContext) -> Request:
        return max(candidates, key=lambda r: r.arrival_s)
