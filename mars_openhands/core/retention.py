"""KV retention strategies: what happens to a session's KV while its tool runs.

Here: vLLM's default (nothing) and InferCept's min-waste rule. Continuum's fixed and dynamic TTLs
are in `continuum.py`, our priced rule in `priced.py`.
"""
from __future__ import annotations

from dataclasses import dataclass

from mars_openhands.core.context import PolicyContext
from mars_openhands.core.model import PinOffer, Session
from mars_openhands.core.strategies import Retention

#: Reload / forward cost per token when nothing is calibrated (MARS, Continuum and InferCept
#: code defaults; docs/workload.md "Engine cost references").
DEFAULT_S_PER_TOKEN = 0.0002


class NoRetention(Retention):
    """vLLM's default: finished calls fall back to the LRU prefix cache; nothing is pinned."""

    def pin_ttl(self, session: Session, context_tokens: int, blocks: int,
                ctx: PolicyContext) -> PinOffer | None:
        return None


@dataclass(frozen=True, slots=True)
class MinWasteConfig:
    #: T_fwd per token; None = the engine's measured prefill rate (1 / ctx.prefill_tps).
    fwd_s_per_token: float | None = DEFAULT_S_PER_TOKEN
    #: Pins shorter than this are not worth the bookkeeping (InferCept/MARS code: 0.01 s).
    min_ttl_s: float = 0.01


class MinWasteRetention(Retention):
    """InferCept: keep the KV for as long as keeping it wastes less memory than discarding it.

    Waste in token-seconds (the per-token KV size cancels): preserving C tokens for tau costs
    tau * C; discarding costs T_fwd(C) * (C + C_other) / 2 -- while the C tokens are recomputed
    (chunked, so on average half of them are resident) the KV of every other running request
    (C_other) sits idle. The longest hold still cheaper than discarding is TTL = discard / C.

    C_other is, as in InferCept, the context tokens held by the other requests of the running
    batch; engines report it through telemetry, so it is read from the KV state:
    (total - free - pinned - this call's blocks) x block size, i.e. the KV referenced by running
    requests other than this one (pins are not part of the running batch).
    """

    def __init__(self, config: MinWasteConfig = MinWasteConfig()) -> None:
        self.config = config

    def other_running_tokens(self, blocks: int, ctx: PolicyContext) -> int:
        kv = ctx.kv
        return max(0, kv.total_blocks - kv.free_blocks - kv.pinned_blocks - blocks) * kv.block_size

    def discard_cost(self, context_tokens: int, blocks: int, ctx: PolicyContext) -> float:
        """Token-seconds wasted by discarding and recomputing `context_tokens`."""
        per_token = self.config.fwd_s_per_token
        if per_token is None:
            per_token = 1.0 / ctx.prefill_tps
        t_fwd = per_token * context_tokens
        return t_fwd * (context_tokens + self.other_running_tokens(blocks, ctx)) / 2.0

    def pin_ttl(self, session: Session, context_tokens: int, blocks: int,
                ctx: PolicyContext) -> PinOffer | None:
        if context_tokens <= 0:
            return None
        discard = self.discard_cost(context_tokens, blocks, ctx)
        ttl = discard / context_tokens
        if ttl <= self.config.min_ttl_s:
            return None
        # Density: token-seconds of waste avoided per block-second held.
        return PinOffer(ttl, value_density=discard / (max(1, blocks) * ttl))
