"""KV retention strategies: what happens to a session's KV while its tool runs."""
from __future__ import annotations

from mars_openhands.core.context import PolicyContext
from mars_openhands.core.model import PinOffer, Session
from mars_openhands.core.strategies import Retention


class NoRetention(Retention):
    """vLLM's default: finished calls fall back to the LRU prefix cache; nothing is pinned."""

    def pin_ttl(self, session: Session, context_tokens: int, blocks: int,
                ctx: PolicyContext) -> PinOffer | None:
        return None
