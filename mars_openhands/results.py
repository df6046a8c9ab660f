"""Results of one policy run, produced alike by the simulator and the real-engine replay.

`summarize` turns a `RunResult` into the `summary.json` entry both commands write, so a simulated
and a measured run of the same trace compare field by field.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class SessionResult:
    session_id: str
    arrival_s: float
    finish_s: float | None      # None: did not complete
    ideal_s: float              # alone on a warm, idle engine (prefill of new tokens, batch-1 decode, tools)
    turns: int

    @property
    def e2e_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.arrival_s


@dataclass(slots=True)
class RunResult:
    policy: str
    sessions: list[SessionResult]
    recomputed_prefill_tokens: int = 0    # prefill tokens computed again after preemption/eviction
    prefix_hit_tokens: int = 0            # prompt tokens served from the prefix cache
    pinned_block_seconds: float = 0.0
    preemptions: int = 0
    #: Seconds the engine sat idle while the policy's admission held calls outside it (a stall).
    held_idle_s: float = 0.0
    #: Time series for plots: (t, admission window or None, kv usage, pinned blocks, running, waiting).
    timeline: list[tuple[float, float | None, float, int, int, int]] = field(default_factory=list)
