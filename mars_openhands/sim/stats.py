"""What a simulation run measures: event counters and a once-a-second timeline.

Only the engine writes them; `runner.run_simulation` turns them into a `RunResult`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

#: One timeline row: (t, admission window or None, KV usage, pinned blocks, running, queued).
Sample = tuple[float, "float | None", float, int, int, int]


@dataclass(slots=True)
class Counters:
    done: int = 0                    # sessions finished
    preemptions: int = 0
    prefix_hit_tokens: int = 0       # prompt tokens the first lookup of each call found cached
    preempt_recompute: int = 0       # prefill tokens computed again after a preemption
    evict_recompute: int = 0         # ... after the prefix cache evicted an earlier turn's blocks
    prefill_tokens: int = 0          # every token computed in prefill mode (new + recomputed)
    decode_tokens: int = 0
    steps: int = 0                   # engine steps simulated (a fast-forwarded run counts each)
    batches: int = 0                 # steps or fast-forwarded runs actually computed
    steady_steps: int = 0            # steps run in a steady run, without re-scheduling
    pins_made: int = 0
    pins_released: int = 0
    pinned_block_seconds: float = 0.0
    #: Simulated seconds with nothing running or waiting in the engine while the policy held
    #: parked calls outside it: a stall of admission (ThunderAgent's program larger than its budget
    #: waits out the 1800 s resume timeout), reported beside the results.
    held_idle_s: float = 0.0

    @property
    def recomputed_prefill_tokens(self) -> int:
        return self.preempt_recompute + self.evict_recompute


@dataclass(slots=True)
class Timeline:
    """The engine's state sampled at every whole second of simulated time."""

    samples: list[Sample] = field(default_factory=list)
    next_s: float = 0.0

    def fill_until(self, t: float, window: float | None, kv_usage: float, pinned_blocks: int,
                   running: int, queued: int) -> None:
        """Record the (unchanged) state at every sample time up to `t`."""
        while self.next_s <= t:
            self.samples.append((round(self.next_s, 3), window, kv_usage, pinned_blocks, running, queued))
            self.next_s += 1.0
