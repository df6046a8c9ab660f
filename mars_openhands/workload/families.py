"""Named workload families: presets of the synthetic generator's knobs (see `synthetic.py`).

They are the workload axis of the matrix benchmark (`mars_openhands.matrix`): shapes of agent
traffic this project was not tuned on, next to today's SWE-bench-like sessions.

============  ====================================================================================
family        what changes (everything else is the calibrated SWE-bench-like generator)
============  ====================================================================================
swe           nothing: today's sessions (``swe-NNNN``, bit-identical to ``generate``'s)
long-context  30 % of sessions start with a 30-60k-token prompt; the context is condensed to the
              head + a few k tokens (summary + 3 % of the budget) when it passes 90k
bursty-cpu    sessions arrive in bursts of 40; CPU-heavy tools: 30 % medium and 10 % slow calls
              (p.u. 22 % / 5 %), tests and builds on 2x the cores, slow calls up to 10 min
chatty        2.5x the turns (p50 90), observations at 0.3x and replies at 0.5x their size, tool
              calls 95 % fast / 5 % medium
reasoning     every reply decodes ~800 hidden reasoning tokens first (dropped from the next
              prompt, as reasoning models' chat templates do)
mix           the five above in equal shares, interleaved, one Poisson arrival process
============  ====================================================================================
"""
from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from mars_openhands.workload.synthetic import SyntheticConfig, arrival_times, generate
from mars_openhands.workload.trace import SessionTrace


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    what: str
    knobs: Mapping[str, Any]       # SyntheticConfig fields


FAMILIES: Mapping[str, Family] = MappingProxyType({f.name: f for f in (
    Family("swe", "today's SWE-bench-like sessions", {}),
    Family("long-context", "long first prompts, condensed to a few k tokens near 90k",
           {"long_prompt_share": 0.3, "long_prompt_tokens": (30_000, 60_000),
            "max_context_tokens": 90_000, "condense_keep": 0.03}),
    Family("bursty-cpu", "bursts of 40 sessions, CPU-heavy long tests and builds",
           {"arrival": "burst", "burst_size": 40, "tool_mix": (0.6, 0.3, 0.1),
            "heavy_cores_scale": 2.0, "slow_cap_s": 600.0}),
    Family("chatty", "many short turns: short replies and observations, fast tools",
           {"turns_scale": 2.5, "obs_scale": 0.3, "output_scale": 0.5, "tool_mix": (0.95, 0.05, 0.0)}),
    Family("reasoning", "long hidden reasoning before every reply",
           {"reasoning_tokens": 800.0}),
)})
#: The families a `mix` trace draws from, in equal shares.
MIX = ("swe", "long-context", "bursty-cpu", "chatty", "reasoning")


def family_names() -> list[str]:
    return [*FAMILIES, "mix"]


def family_config(name: str, n_sessions: int, *, rate: float, seed: int) -> SyntheticConfig:
    """The generator config of family `name` (not `mix`, which combines several)."""
    if name not in FAMILIES:
        raise ValueError(f"unknown workload family {name!r}; known: {', '.join(family_names())}")
    return SyntheticConfig(n_sessions, rate=rate, seed=seed, **FAMILIES[name].knobs)


def _renamed(sessions: list[SessionTrace], family: str) -> list[SessionTrace]:
    width = max(4, len(str(len(sessions) - 1)))
    return [dataclasses.replace(s, session_id=f"{family}-{i:0{width}d}") for i, s in enumerate(sessions)]


def family_sessions(name: str, n_sessions: int, *, rate: float, seed: int) -> list[SessionTrace]:
    """`n_sessions` sessions of family `name` arriving at `rate` sessions/s on average.

    As with `generate`, contents depend on the seed only and arrivals scale with 1/rate, so one
    seed gives the same sessions at every load.
    """
    if name != "mix":
        sessions = generate(family_config(name, n_sessions, rate=rate, seed=seed))
        return sessions if name == "swe" else _renamed(sessions, name)
    if n_sessions < len(MIX):
        raise ValueError(f"family mix: needs at least {len(MIX)} sessions, got {n_sessions}")
    parts = []
    for i, fam in enumerate(MIX):
        n = n_sessions // len(MIX) + (i < n_sessions % len(MIX))
        parts += _renamed(generate(family_config(fam, n, rate=rate, seed=seed)), fam)
    random.Random(f"mars-families:{seed}:mix").shuffle(parts)
    times = arrival_times(SyntheticConfig(n_sessions, rate=rate, seed=seed))
    return [dataclasses.replace(s, arrival_s=t, source=f"{s.source} family=mix")
            for s, t in zip(parts, times)]
