"""Ordering strategies (priority coordinators)."""
from __future__ import annotations

from mars_openhands.core.context import PolicyContext
from mars_openhands.core.model import Request
from mars_openhands.core.strategies import Ordering


class FcfsOrdering(Ordering):
    """vLLM's default: first come, first served per request; no prefill quantum."""

    def key(self, req: Request, ctx: PolicyContext) -> tuple:
        return (req.arrival_s,)
