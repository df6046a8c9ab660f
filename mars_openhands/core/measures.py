"""What the engines measure for the policy to price with, as EMAs: the prefill-start latency
(queueing inside the engine), the prefill rate, how much a session's context grows per turn and
how long a session stays away between calls; and a count of the tokens computed again."""
from __future__ import annotations

from dataclasses import dataclass

from mars_openhands.core.context import PolicyContext
from mars_openhands.core.model import KVState, Request, Session

#: EMA weight of the prefill-start latency, fed by `Policy.observe_prefill_start`.
PREFILL_START_EMA = 0.2
#: EMA weight of the per-turn context growth (as for the other EMAs of the information stream).
GROWTH_EMA = 0.2
#: EMA weight of the measured prefill rate (tokens/s) an engine feeds `Policy.observe_prefill`.
PREFILL_RATE_EMA = 0.2
#: EMA weight of the gap between a session's calls.
RETURN_GAP_EMA = 0.2


@dataclass
class PrefillStartLatency:
    """EMA of the prefill-start latency; None until a first call starts. It reaches the context
    only when published (`Policy.observe_kv`), so the control plane reads it as of the top of the
    step, like the rest of the GPU plane, in both engines."""

    ema_s: float | None = None

    def observe(self, wait_s: float) -> None:
        ema = self.ema_s or 0.0
        self.ema_s = ema + PREFILL_START_EMA * (wait_s - ema)

    def publish(self, kv: KVState) -> None:
        if self.ema_s is not None:
            kv.prefill_start_latency_s = self.ema_s


def observe_prefill_rate(ctx: PolicyContext, tokens: int, seconds: float, alpha: float = PREFILL_RATE_EMA) -> None:
    """A measured prefill (tokens computed in `seconds`) moves `ctx.prefill_tps`."""
    if tokens > 0 and seconds > 0:
        ctx.prefill_tps += alpha * (tokens / seconds - ctx.prefill_tps)


def observe_turn_growth(ctx: PolicyContext, s: Session, prompt_tokens: int) -> None:
    """`s`'s next call arrived with `prompt_tokens`: its growth over the last call's prompt and
    output (condensation counts as 0) moves `ctx.turn_growth_tokens`."""
    growth = max(0, prompt_tokens - s.context_tokens)
    ctx.turn_growth_tokens += GROWTH_EMA * (growth - ctx.turn_growth_tokens)


def observe_return_gap(ctx: PolicyContext, s: Session, now: float) -> None:
    """`s`'s next call arrived at `now`: the time since its last call ended moves
    `ctx.return_gap_s` (the first gap sets it)."""
    if s.last_turn_finished_s is None:           # (set when a call of it finishes)
        return
    gap = now - s.last_turn_finished_s
    ctx.return_gap_s = gap if ctx.return_gap_s is None else ctx.return_gap_s + RETURN_GAP_EMA * (gap - ctx.return_gap_s)


def observe_recompute(ctx: PolicyContext, s: Session, req: Request) -> None:
    """`req` of `s` finished (before `s` takes its context): the prompt tokens it was served beyond
    its new ones (the prompt past the session's last context) count as recomputed, whether a
    preemption or an evicted prefix cost them. Engine-agnostic: served tokens are what each step
    scheduled for it (`Request.attained_tokens`), one per decode step."""
    new = req.prompt_tokens - s.context_tokens
    waste = req.attained_tokens - req.output_tokens - (new if new > 0 else 0)
    if waste > 0:
        ctx.recomputed_tokens += waste
