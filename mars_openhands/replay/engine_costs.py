"""Engine cost measured on an idle server: the ideal latency of each session and the sim profile.

Slowdown and goodput need each session's latency *alone on a warm, idle engine*. We measure it
rather than guess it: probes on the idle server time a prefill of `n` new tokens after `ctx`
cached ones (max_tokens=1), batch-1 decode at several context lengths, and decode with k requests
in the batch (a step: the batch generating 2 L tokens less the batch generating L, over L).
Every probe is repeated (`ProbePlan.reps`) and the fit is made on the median time of each probe
shape, so one probe slowed by the host's other work does not bend it. Least-squares fits
(coefficients kept >= 0) give

    prefill(n, ctx) = a + b n + c n (ctx + n/2)          (attention grows with the context)
    decode step     = d0 + d_seq k + d_ctx sum(ctx)       (k sequences in the batch)

`fit_problems` says why a fit must not be used: degenerate (a prefill or a decode step that costs
nothing, a coefficient not finite) or too far from its own medians (`FitError`).

The ideal turn = prefill of the tokens a warm cache cannot serve (full blocks only, never the last
token, as vLLM does) + (output - 1) batch-1 decode steps; the ideal session adds its tool times.
The same constants are the simulator's step costs (`EngineCosts.as_profile`): `bench-engine` re-fits
`cpu-small` with them, `mars-openhands calibrate` (`calibrate.py`) writes a profile of any engine.
"""
from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import numpy as np

from mars_openhands.events import SessionEnded
from mars_openhands.replay.engine import EngineClient, EngineError
from mars_openhands.sim.profiles import Profile
from mars_openhands.workload.prompts import TokenSpace, TurnShape


@dataclass(frozen=True)
class EngineCosts:
    """Fitted per-request costs of one engine + model + host (seconds)."""

    block_size: int
    prefill_a_s: float
    prefill_per_token_s: float
    prefill_per_token_ctx_s: float
    decode_step_s: float                  # d0: a decode step's fixed cost
    decode_per_seq_s: float               # d_seq: each sequence in the batch
    decode_per_ctx_token_s: float         # d_ctx: each context token read by the batch

    def prefill_s(self, new: int, ctx: int) -> float:
        if new <= 0:
            return self.prefill_a_s
        return self.prefill_a_s + self.prefill_per_token_s * new + self.prefill_per_token_ctx_s * new * (ctx + new / 2)

    def decode_step_at(self, batch: int, ctx_sum: int) -> float:
        return self.decode_step_s + self.decode_per_seq_s * batch + self.decode_per_ctx_token_s * ctx_sum

    def warm_hit(self, shape: TurnShape) -> int:
        """Tokens a warm prefix cache serves: whole blocks of the reusable prefix, never the last token."""
        usable = min(shape.reusable_tokens, shape.prompt_tokens - 1)
        return max(0, usable) // self.block_size * self.block_size

    def turn_s(self, shape: TurnShape) -> float:
        hit = self.warm_hit(shape)
        steps = shape.output_tokens - 1
        decode = steps * self.decode_step_at(1, shape.prompt_tokens + shape.output_tokens // 2) if steps > 0 else 0.0
        return self.prefill_s(shape.prompt_tokens - hit, hit) + decode

    def session_ideal_s(self, shapes: list[TurnShape], tool_seconds: float) -> float:
        return sum(self.turn_s(s) for s in shapes) + tool_seconds

    def as_profile(self, base: Profile) -> Profile:
        """`base` (the engine's shape and host) with these costs as the simulator's step cost
        t = a + b P + c A + d D + e C: a step's fixed cost, prefill per token and per token x
        context token, decode per sequence and per context token read (no bandwidth term)."""
        return base.with_overrides(a=self.decode_step_s, b=self.prefill_per_token_s, c=self.prefill_per_token_ctx_s,
                                   d=self.decode_per_seq_s, e=self.decode_per_ctx_token_s, block_size=self.block_size)


def nonneg_lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with coefficients >= 0 (drop the most negative one and refit)."""
    active = list(range(x.shape[1]))
    coef = np.zeros(x.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(x[:, active], y, rcond=None)
        if (sol >= 0).all():
            coef[active] = sol
            return coef
        del active[int(np.argmin(sol))]
    return coef


@dataclass
class Samples:
    """Raw probe timings, kept in the output for inspection."""

    prefill: list[tuple[int, int, float]] = field(default_factory=list)      # (new, ctx, seconds)
    decode: list[tuple[int, int, float]] = field(default_factory=list)       # (batch, ctx_sum, s/step)
    #: Decode probes whose long run did not outlast the short one (noise): not fitted.
    decode_failed: int = 0

    def extend(self, other: Samples) -> None:
        self.prefill += other.prefill
        self.decode += other.decode
        self.decode_failed += other.decode_failed

    def add_decode(self, batch: int, ctx_sum: int, step_s: float | None) -> None:
        if step_s is None:
            self.decode_failed += 1
        else:
            self.decode.append((batch, ctx_sum, step_s))

    def medians(self) -> tuple[list[Point], list[Point]]:
        """(prefill, decode) points: each probe shape once, with the median of its repeated times."""
        return _medians(self.prefill), _medians(self.decode)

    def fit(self, block_size: int) -> EngineCosts:
        prefill, decode = self.medians()
        if len(prefill) < 3 or len(decode) < 3:
            raise ValueError("calibration: too few probe samples to fit engine costs")
        p = np.array([(x.size, x.ctx, x.median_s) for x in prefill], dtype=float)
        n, ctx, t = p[:, 0], p[:, 1], p[:, 2]
        a, b, c = nonneg_lstsq(np.stack([np.ones_like(n), n, n * (ctx + n / 2)], axis=1), t)
        d = np.array([(x.size, x.ctx, x.median_s) for x in decode], dtype=float)
        d0, dseq, dctx = nonneg_lstsq(np.stack([np.ones(len(d)), d[:, 0], d[:, 1]], axis=1), d[:, 2])
        return EngineCosts(block_size, float(a), float(b), float(c), float(d0), float(dseq), float(dctx))


@dataclass(frozen=True)
class Point:
    """One probe shape: (new tokens, cached context) of a prefill or (batch, context sum) of a
    decode step, with every time measured for it and their median."""

    size: int
    ctx: int
    times_s: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return float(np.median(self.times_s))


def _medians(samples: list[tuple[int, int, float]]) -> list[Point]:
    times: dict[tuple[int, int], list[float]] = {}
    for size, ctx, t in samples:
        times.setdefault((size, ctx), []).append(t)
    return [Point(size, ctx, tuple(ts)) for (size, ctx), ts in sorted(times.items())]


#: Default bound on the fit's rms relative error over the probe medians, prefill and decode each:
#: past it the fit's predictions are off by more than half on average, and a simulator using them
#: predicts nothing about this engine.
MAX_FIT_ERROR = 0.5


@dataclass(frozen=True)
class FitError:
    """The fit's relative error (predicted / measured - 1) over the probe medians."""

    rms: float
    worst: float

    @classmethod
    def of(cls, predicted_measured: list[tuple[float, float]]) -> FitError:
        errs = np.array([p / t - 1 for p, t in predicted_measured if t > 0])
        if not len(errs):
            return cls(0.0, 0.0)
        return cls(float(np.sqrt(np.mean(errs ** 2))), float(np.max(np.abs(errs))))


def fit_errors(samples: Samples, costs: EngineCosts) -> tuple[FitError, FitError]:
    """(prefill, decode) errors of `costs` against the medians it was fitted on."""
    prefill, decode = samples.medians()
    return (FitError.of([(costs.prefill_s(x.size, x.ctx), x.median_s) for x in prefill]),
            FitError.of([(costs.decode_step_at(x.size, x.ctx), x.median_s) for x in decode]))


#: A part of the fit under this share of what the probes measured counts as costing nothing.
NEGLIGIBLE = 0.01


def fit_problems(samples: Samples, costs: EngineCosts, max_error: float = MAX_FIT_ERROR) -> list[str]:
    """Why the fit must not be used (empty: it may): a coefficient negative or not finite; a prefill
    that costs nothing per token (b = c = 0: at the largest prefill probed, the per-token terms under
    `NEGLIGIBLE` of the time); a decode step that costs nothing (d0 = d_seq = 0: a batch of one under
    `NEGLIGIBLE` of the shortest step measured); an rms error over the probe medians past `max_error`."""
    problems = []
    coefs = dataclasses.asdict(costs)
    del coefs["block_size"]
    bad = [f"{k} = {v!r}" for k, v in coefs.items() if not math.isfinite(v) or v < 0]
    if bad:
        return [f"coefficients negative or not finite: {', '.join(bad)}"]
    prefill, decode = samples.medians()
    if prefill:
        big = max(prefill, key=lambda x: (x.size, x.ctx))
        per_token = costs.prefill_s(big.size, big.ctx) - costs.prefill_a_s
        if per_token <= NEGLIGIBLE * big.median_s:
            problems.append("degenerate fit: prefill costs nothing per token (b = c = 0)")
    if decode and costs.decode_step_s + costs.decode_per_seq_s <= NEGLIGIBLE * min(x.median_s for x in decode):
        problems.append("degenerate fit: a decode step costs nothing (d0 = d_seq = 0)")
    for part, err in zip(("prefill", "decode"), fit_errors(samples, costs)):
        if err.rms > max_error:
            problems.append(f"{part} fit error {err.rms:.0%} rms (worst {err.worst:.0%}) over the probe medians "
                            f"is past the bound of {max_error:.0%}")
    return problems


def _grid(top: int, block: int, points: int) -> list[int]:
    """`points` block-aligned sizes spread up to `top` (at least one block)."""
    top = max(block, top // block * block)
    return sorted({max(block, int(top * f) // block * block) for f in np.linspace(1 / points, 1, points)})


BATCHES = (2, 4, 8)
#: Tokens of a decode probe's short run (the long run generates twice as many). The step is the
#: difference of two wall times over these tokens: at 32 tokens of a 2-4 ms step the difference
#: (about 0.1 s) was within a loaded host's noise, and a third of the probes measured 0.
DECODE_TOKENS = 128
MAX_PROBE_NEW = 2048
MAX_PROBE_CTX = 8192


@dataclass(frozen=True)
class ProbePlan:
    """Probe sizes covering a replay's range: prefill up to `max_new` new tokens after up to
    `max_ctx` cached ones; decode at several contexts and batch sizes."""

    new_sizes: list[int]
    ctx_sizes: list[int]
    decode_len: int
    block_size: int
    reps: int = 1

    @classmethod
    def cover(cls, block_size: int, max_new: int, max_ctx: int, max_len: int, reps: int = 1) -> ProbePlan:
        """Sizes up to the replay's largest (capped: the fit extrapolates, probes stay short), every
        probe within `max_len` (the engine's max model length)."""
        decode_len = max(4, min(DECODE_TOKENS, max_len // 16))
        new = min(max_new, MAX_PROBE_NEW, max(block_size, max_len // 2))
        ctx = min(max_ctx, MAX_PROBE_CTX, max_len - max(new, block_size) - 2 * decode_len - 1)
        if ctx < block_size:
            raise ValueError(f"calibration: max model length {max_len} leaves no room for probes")
        return cls(_grid(new, block_size, 3), [0] + _grid(ctx, block_size, 2), decode_len, block_size, reps)

    @property
    def count(self) -> int:
        per_rep = len(self.ctx_sizes) * len(self.new_sizes) + len(self.ctx_sizes) + 2 * len(BATCHES)
        return per_rep * self.reps


async def _end(engine: EngineClient, *session_ids: str) -> None:
    """Probes are one-turn sessions: end them at once so no policy keeps state (or pins) for them."""
    try:
        await engine.post_events([SessionEnded(session_id=sid, t=time.time(), reason="calibration")
                                  for sid in session_ids])
    except (EngineError, httpx.HTTPError):
        pass    # a stock server has no events endpoint


async def calibrate(engine: EngineClient, space: TokenSpace, plan: ProbePlan,
                    progress: Callable[[], None] | None = None) -> Samples:
    """Run the probes of `plan` one at a time on an idle engine (batches: k at once)."""
    s = Samples()
    tick = progress or (lambda: None)
    dl, bs = plan.decode_len, plan.block_size
    for rep in range(plan.reps):
        bases: dict[int, list[int]] = {}
        for ctx in plan.ctx_sizes:
            base = bases[ctx] = space.draw(f"probe/{rep}/base/{ctx}", ctx)
            if ctx:
                await engine.complete(base, 1, f"probe/{rep}/base/{ctx}", 0)     # warm the prefix once
                await _end(engine, f"probe/{rep}/base/{ctx}")
            for n in plan.new_sizes:
                key = f"probe/{rep}/{ctx}/{n}"
                c = await engine.complete(base + space.draw(key, n), 1, key, 0)
                await _end(engine, key)
                hit = c.cached_tokens if c.cached_tokens is not None else ctx
                s.prefill.append((ctx + n - hit, hit, c.finished - c.submitted))
                tick()
        for ctx, base in bases.items():      # batch-1 decode after each (cached) context
            step = await _decode_step(engine, [f"probe/{rep}/decode/{ctx}"], _after(base, space, bs), dl)
            s.add_decode(1, ctx + bs + dl + dl // 2, step)
            tick()
        # Batches after no context and after the longest: per sequence and per context token apart.
        for ctx in (0, max(plan.ctx_sizes)):
            for k in BATCHES:
                step = await _decode_step(engine, [f"probe/{rep}/batch/{ctx}/{k}/{i}" for i in range(k)],
                                          _after(bases[ctx], space, bs), dl)
                s.add_decode(k, k * (ctx + bs + dl + dl // 2), step)
                tick()
    return s


def _after(base: list[int], space: TokenSpace, n: int) -> Callable[[str], list[int]]:
    """Prompts `base` + n fresh tokens drawn for each key."""
    return lambda key: base + space.draw(key, n)


async def _decode_step(engine: EngineClient, keys: list[str], prompt: Callable[[str], list[int]],
                       dl: int) -> float | None:
    """Seconds per decode step of a batch of len(keys) requests: the batch generating 2 dl tokens
    less the same batch (fresh prompts of the same shape) generating dl, over dl. The prefill
    cancels out, and so does the stream's timing: a server may send tokens in bursts, so the gaps
    between streamed tokens are no measure of a step."""
    async def batch(n: int, tag: str) -> float:
        ks = [f"{key}/{tag}" for key in keys]
        t0 = time.monotonic()
        cs = await asyncio.gather(*(engine.complete(prompt(key), n, key, 0) for key in ks))
        await _end(engine, *ks)
        return max(c.finished for c in cs) - t0
    short = await batch(dl, "short")
    extra = await batch(2 * dl, "long") - short
    return extra / dl if extra > 0 else None     # noise outran the difference: no measurement
