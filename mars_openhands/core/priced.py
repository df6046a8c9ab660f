"""Our KV retention rule (docs/policies.md "Priced KV retention"; MARS' preview has none).

At the end of a turn with C context tokens in B blocks:

    benefit(tau) = P(session resumes within tau) * (C / prefill rate + re-queue delay)
    cost(tau)    = B * tau * lambda
    pin for tau* = argmax(benefit - cost) if that is positive

lambda, the shadow price of KV memory in seconds of work per block-second, is 0 while the free
blocks exceed the predicted demand of waiting work, and otherwise rises with the deficit:

    lambda = price_gain * (block_size / prefill rate) * deficit / total_blocks

i.e. a block-second costs `price_gain * deficit fraction` times the time it takes to recompute one
block: a 2 % deficit with the default gain of 50 prices holding a block one second like
recomputing it. The resume time is predicted per tool call (`durations.py`), learned from
`ToolFinished` (run time + queue wait: when the session can send its next call). Pins are
repriced when a tool-started event names the tool (and its hint) and when lambda moves by more
than `reprice_factor` (for every pin: conditional on the time already waited); revocation drops
the lowest value density (expected seconds saved per block-second) first.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

from mars_openhands.core.context import PolicyContext
from mars_openhands.core.durations import DurationConfig, DurationPredictor, ToolCalls
from mars_openhands.core.model import Pin, PinOffer, Session
from mars_openhands.core.strategies import Retention
from mars_openhands.events import EngineTelemetry, Event, ToolStarted


@dataclass(frozen=True, slots=True)
class PricedConfig:
    price_gain: float = 50.0
    #: Never hold past this quantile of the predicted resume time (lambda = 0 would say "forever").
    max_quantile: float = 0.995
    #: Reprice all pins when lambda changes by more than this factor (or starts / stops being 0).
    reprice_factor: float = 2.0
    durations: DurationConfig = field(default_factory=DurationConfig)

    def __post_init__(self) -> None:
        if self.price_gain < 0 or not 0 < self.max_quantile < 1 or self.reprice_factor <= 1:
            raise ValueError("PricedConfig: need price_gain >= 0, 0 < max_quantile < 1, "
                             f"reprice_factor > 1; got {self}")


class PricedRetention(Retention):
    """Pin a session's KV for the hold that maximises expected time saved minus its memory price."""

    def __init__(self, config: PricedConfig = PricedConfig()) -> None:
        self.config = config
        self.durations = DurationPredictor(config.durations)
        self._tools = ToolCalls()
        self._priced_lambda = 0.0                     # lambda the current pins were priced at

    # ---- the price ---------------------------------------------------------------------------

    def shadow_price(self, ctx: PolicyContext) -> float:
        """lambda: seconds of work per block-second of KV held, from the current deficit."""
        kv = ctx.kv
        deficit = kv.waiting_demand_blocks - kv.free_blocks
        if deficit <= 0 or kv.total_blocks <= 0:
            return 0.0
        return self.config.price_gain * (kv.block_size / ctx.prefill_tps) * deficit / kv.total_blocks

    def resume_gain_s(self, context_tokens: int, ctx: PolicyContext) -> float:
        """Seconds a warm resume saves: recomputing the context plus waiting to be scheduled."""
        return context_tokens / ctx.prefill_tps + ctx.kv.prefill_start_latency_s

    def best_hold(self, tool: ToolStarted | None, context_tokens: int, blocks: int,
                  ctx: PolicyContext, waited_s: float = 0.0) -> tuple[float, float, float]:
        """(hold seconds from now, net value, value density) of the best hold, given that the
        call has not returned after `waited_s`; hold 0 = do not pin."""
        name, command, hint = ((tool.tool_name, tool.command, tool.expected_duration_s)
                               if tool is not None else (None, None, None))
        pred = self.durations
        cdf = pred.cdf_at_edges(name, command, hint)
        f0 = pred.interpolate(cdf, waited_s)
        if f0 >= 1.0:
            return 0.0, 0.0, 0.0
        gain = self.resume_gain_s(context_tokens, ctx) / (1.0 - f0)
        rent = blocks * self.shadow_price(ctx)
        cap, edges = self.config.max_quantile, pred.edges
        start = bisect_right(edges, waited_s)
        best_hold = best_value = best_p = 0.0
        if rent == 0.0 and start < len(edges):
            # free memory: value only grows with the hold, so stop at the cap quantile
            i = min(bisect_left(cdf, cap, lo=start), len(edges) - 1)
            i = bisect_left(cdf, cdf[i], lo=start)          # earliest edge with that probability
            if cdf[i] > f0:
                best_hold, best_p = edges[i] - waited_s, cdf[i] - f0
                best_value = best_p * gain
        else:
            for t, f in zip(edges[start:], cdf[start:]):
                hold = t - waited_s
                value = (f - f0) * gain - rent * hold
                if value > best_value:
                    best_hold, best_value, best_p = hold, value, f - f0
                if f >= cap:
                    break
        if best_hold <= 0.0:
            return 0.0, 0.0, 0.0
        density = best_p * gain / (max(1, blocks) * best_hold)
        return best_hold, best_value, density

    # ---- Retention hooks ---------------------------------------------------------------------

    def pin_ttl(self, session: Session, context_tokens: int, blocks: int,
                ctx: PolicyContext) -> PinOffer | None:
        if not ctx.pins:      # no pin priced at an older lambda: start tracking from here
            self._priced_lambda = self.shadow_price(ctx)
        hold, _, density = self.best_hold(session.in_tool, context_tokens, blocks, ctx)
        return PinOffer(hold, density) if hold > 0 else None

    def reprice(self, pin: Pin, session: Session, ctx: PolicyContext) -> float:
        """New expiry once the tool is known (tool-started hint) or the price moved."""
        tool = session.in_tool or self._tools.running(session.session_id)
        ref = tool.t if tool is not None else pin.pinned_s
        waited = max(0.0, ctx.now - ref)
        hold, _, density = self.best_hold(tool, session.context_tokens, pin.blocks, ctx, waited)
        pin.value_density = density
        return ctx.now + hold if hold > 0 else ctx.now

    def observe(self, event: Event, ctx: PolicyContext) -> None:
        done = self._tools.observe(event)
        if done is not None:
            self.durations.observe(done.tool_name, done.command, done.seconds)
        elif isinstance(event, EngineTelemetry) and ctx.pins:
            lam, old = self.shadow_price(ctx), self._priced_lambda
            f = self.config.reprice_factor
            if (lam == 0.0) != (old == 0.0) or lam > old * f or lam * f < old:
                self._priced_lambda = lam
                for pin in ctx.pins:
                    s = ctx.sessions.get(pin.session_id)
                    if s is not None:
                        pin.expires_s = self.reprice(pin, s, ctx)
